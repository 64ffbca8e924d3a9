// Data-parallel training over processes with c10d: the torchrun environment (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT; Slurm launchers set the same variables), a TCPStore
// rendezvous, and a Gloo (CPU) or NCCL (CUDA) process group that broadcasts the initial parameters,
// averages gradients every step and checks that the ranks' parameters stayed identical.
// c10d headers stay in distributed.cpp; a single process (WORLD_SIZE unset or 1) needs no group.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

namespace arcal {

struct DistributedEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool active() const { return world_size > 1; }
  bool primary() const { return rank == 0; }
};

/// Reads the torchrun variables. WORLD_SIZE unset (or 1) is a single process. Throws InputError
/// naming the variable when a value is malformed or RANK is outside [0, WORLD_SIZE).
DistributedEnv distributed_env_from_environment();

/// True when this build can form a process group for the device type ("cpu": Gloo, "cuda": NCCL).
bool distributed_backend_available(const std::string& device);

class DataParallelGroup {
 public:
  /// Rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 hosts the store, or under torchrun the elastic
  /// agent does: TORCHELASTIC_USE_AGENT_STORE) and forms the group. Gloo
  /// binds to GLOO_SOCKET_IFNAME when set, to 127.0.0.1 when MASTER_ADDR is a loopback address,
  /// and to the host name otherwise. Throws InputError when the backend is not built in.
  DataParallelGroup(const DistributedEnv& env, const std::string& device, double timeout_seconds = 300);
  ~DataParallelGroup();

  const DistributedEnv& env() const { return env_; }
  /// Copies rank 0's parameters and buffers to every rank.
  void broadcast_module(torch::nn::Module& module);
  /// Replaces every gradient by its average over the ranks (one flat all-reduce).
  void average_gradients(torch::nn::Module& module);
  /// max |p_rank - p_rank0| over all parameters and ranks (collective; the same value on every rank).
  double max_parameter_divergence(torch::nn::Module& module);
  void barrier();
  /// True on every rank when `flag` is true on any rank (collective; used to stop all ranks together).
  bool any_rank(bool flag);

 private:
  struct Impl;
  DistributedEnv env_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace arcal
