#include "train/distributed.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <chrono>
#include <cstdlib>

#include "core/check.hpp"

// LibTorch's CMake config defines USE_C10D_GLOO / USE_C10D_NCCL when the library has the backend;
// the Gloo headers come from a separate package (Debian: libgloo-dev), NCCL's from the CUDA toolkit.
#if defined(USE_C10D_GLOO) && __has_include(<gloo/algorithm.h>)
#define ARCAL_HAS_GLOO 1
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
#define ARCAL_HAS_NCCL 1
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace arcal {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 30)
    throw_input("environment", std::string(name) + " is '" + v + "', but must be a non-negative integer");
  return static_cast<int>(x);
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1"; }

std::vector<torch::Tensor> grads_of(torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (auto& p : module.parameters())
    if (p.requires_grad()) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      out.push_back(p.grad());
    }
  return out;
}

}  // namespace

DistributedEnv distributed_env_from_environment() {
  DistributedEnv e;
  e.world_size = env_int("WORLD_SIZE", 1);
  if (e.world_size < 1) throw_input("environment", "WORLD_SIZE must be >= 1");
  e.rank = env_int("RANK", 0);
  e.local_rank = env_int("LOCAL_RANK", e.rank);
  if (e.rank >= e.world_size)
    throw_input("environment", "RANK " + std::to_string(e.rank) +
                                   " is outside [0, WORLD_SIZE = " + std::to_string(e.world_size) + ")");
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  e.master_port = env_int("MASTER_PORT", 29500);
  if (e.master_port < 1 || e.master_port > 65535)
    throw_input("environment", "MASTER_PORT " + std::to_string(e.master_port) + " is not a TCP port");
  if (e.active() && !std::getenv("MASTER_PORT"))
    throw_input("environment", "WORLD_SIZE is " + std::to_string(e.world_size) +
                                   " but MASTER_PORT is not set (start the ranks with torchrun or set RANK, "
                                   "WORLD_SIZE, MASTER_ADDR and MASTER_PORT)");
  return e;
}

bool distributed_backend_available(const std::string& device) {
#ifdef ARCAL_HAS_GLOO
  if (device == "cpu") return true;
#endif
#ifdef ARCAL_HAS_NCCL
  if (device == "cuda") return true;
#endif
  (void)device;
  return false;
}

struct DataParallelGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  // The backend itself (ProcessGroupGloo / ProcessGroupNCCL are c10d::Backends since torch 2.0).
  c10::intrusive_ptr<c10d::Backend> group;
  bool device_is_cuda = false;
};

DataParallelGroup::DataParallelGroup(const DistributedEnv& env, const std::string& device, double timeout_seconds)
    : env_(env), impl_(std::make_unique<Impl>()) {
  impl_->device_is_cuda = device == "cuda";
  if (!distributed_backend_available(device))
    throw_input("distributed", "WORLD_SIZE > 1 on --device " + device + " needs c10d's " +
                                   (device == "cuda" ? "NCCL" : "Gloo") + " backend, which this LibTorch build lacks");
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds * 1000));
  // Under torchrun the elastic agent already hosts a TCPStore at MASTER_ADDR:MASTER_PORT and sets
  // TORCHELASTIC_USE_AGENT_STORE=True: every rank is then a client, under the per-attempt prefix
  // PyTorch's env:// rendezvous uses. Otherwise rank 0 hosts the store.
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent && std::string(agent) == "True";
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = !agent_store && env.rank == 0;
  so.numWorkers = static_cast<std::size_t>(env.world_size);
  so.waitWorkers = true;
  so.timeout = timeout;
  so.multiTenant = true;
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    if (agent_store) {
      const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
      impl_->store = c10::make_intrusive<c10d::PrefixStore>(std::string("/worker/attempt_") + (attempt ? attempt : "0"),
                                                            impl_->store);
    }
  } catch (const std::exception& e) {
    throw_input("distributed", "rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port) +
                                   " failed for rank " + std::to_string(env.rank) + ": " + e.what());
  }
#ifdef ARCAL_HAS_NCCL
  if (device == "cuda") {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    impl_->group = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, env.rank, env.world_size, opts);
    return;
  }
#endif
#ifdef ARCAL_HAS_GLOO
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->timeout = timeout;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  else if (is_loopback(env.master_addr))
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, env.rank, env.world_size, opts);
#endif
}

DataParallelGroup::~DataParallelGroup() = default;

void DataParallelGroup::broadcast_module(torch::nn::Module& module) {
  torch::NoGradGuard guard;
  std::vector<torch::Tensor> ts;
  for (auto& p : module.parameters()) ts.push_back(p);
  for (auto& b : module.buffers()) ts.push_back(b);
  for (auto& t : ts) {
    std::vector<torch::Tensor> one{t.data()};
    impl_->group->broadcast(one)->wait();
  }
}

void DataParallelGroup::average_gradients(torch::nn::Module& module) {
  torch::NoGradGuard guard;
  auto grads = grads_of(module);
  if (grads.empty()) return;
  std::vector<torch::Tensor> flat{torch::cat([&] {
    std::vector<torch::Tensor> views;
    for (auto& g : grads) views.push_back(g.reshape({-1}));
    return views;
  }())};
  impl_->group->allreduce(flat)->wait();  // sum
  flat[0].div_(static_cast<double>(env_.world_size));
  std::int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat[0].narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

double DataParallelGroup::max_parameter_divergence(torch::nn::Module& module) {
  torch::NoGradGuard guard;
  double worst = 0;
  torch::Device device = torch::kCPU;
  for (auto& p : module.parameters()) {
    device = p.device();
    std::vector<torch::Tensor> ref{p.detach().clone()};
    impl_->group->broadcast(ref)->wait();
    worst = std::max(worst, (p.detach() - ref[0]).abs().max().item<double>());
  }
  std::vector<torch::Tensor> w{torch::tensor({worst}, torch::TensorOptions().dtype(torch::kDouble).device(device))};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  impl_->group->allreduce(w, o)->wait();
  return w[0].item<double>();
}

void DataParallelGroup::barrier() { impl_->group->barrier()->wait(); }

bool DataParallelGroup::any_rank(bool flag) {
  const torch::Device device = impl_->device_is_cuda
                                   ? torch::Device(torch::kCUDA, static_cast<torch::DeviceIndex>(env_.local_rank))
                                   : torch::Device(torch::kCPU);
  std::vector<torch::Tensor> t{
      torch::tensor({flag ? 1.0 : 0.0}, torch::TensorOptions().dtype(torch::kDouble).device(device))};
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::MAX;
  impl_->group->allreduce(t, o)->wait();
  return t[0].item<double>() > 0;
}

}  // namespace arcal
