#include "ops/torch/onednn_gemm.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#if ARCAL_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

namespace arcal {

namespace {

// LibTorch 1.13's threshold below which a bf16 product goes to its reference GEMM instead of oneDNN
// (mkldnn_bf16_gemm and use_mkldnn_bf16_matmul: M K N > 16^3).
constexpr std::int64_t kMinProduct = 16 * 16 * 16;

// Strides of a 2-d operand of r rows and c columns that oneDNN takes as plain row- or column-major.
bool plain_strides(const torch::Tensor& t) {
  const auto r = t.size(0), c = t.size(1);
  return (t.stride(1) == 1 && t.stride(0) >= c) || (t.stride(0) == 1 && t.stride(1) >= r);
}

// A plain operand with no gap between its rows (row-major) or columns (column-major) as it is, any
// other plain one (a row selection: the first-token head's input, row stride T d) as a row-major
// copy. oneDNN 2.6's brgemm matmul takes dense operands only and sends the others to its gemm:jit
// implementation, whose execution fails in a process that also holds PyTorch 2.x's own oneDNN
// (seen on an AMX CPU: "could not execute a primitive"); the copy is a few hundred kB at most.
torch::Tensor dense_operand(const torch::Tensor& t) {
  const auto r = t.size(0), c = t.size(1);
  const bool dense = (t.stride(1) == 1 && t.stride(0) == c) || (t.stride(0) == 1 && t.stride(1) == r);
  return dense ? t : t.contiguous();
}

// A primitive for one product: shapes, strides, bias, threads. Empty prim where oneDNN refused.
struct Plan {
  std::unique_ptr<dnnl::matmul> prim;
  dnnl::memory::desc a, b, c, bias, scratch;
};

using Key = std::array<std::int64_t, 9>;  // M, K, N, a strides, b strides, bias, threads

struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Plan> plans;
  std::vector<char> scratch;  // the primitives' scratchpad (user mode): one buffer per thread
};

ThreadState& thread_state() {
  thread_local ThreadState state;
  return state;
}

// Ahead of the descriptors: a thread's cache holds one plan per product shape it has seen. A training
// has a few dozen (its layers' shapes, the last batch's); this bound only guards odd callers.
constexpr std::size_t kMaxPlans = 512;

Plan& plan_for(ThreadState& st, const Key& key) {
  auto it = st.plans.find(key);
  if (it != st.plans.end()) return it->second;
  if (st.plans.size() >= kMaxPlans) st.plans.clear();
  using dt = dnnl::memory::data_type;
  const auto M = key[0], K = key[1], N = key[2];
  Plan p;
  p.a = dnnl::memory::desc({M, K}, dt::bf16, dnnl::memory::dims{key[3], key[4]});
  p.b = dnnl::memory::desc({K, N}, dt::bf16, dnnl::memory::dims{key[5], key[6]});
  p.c = dnnl::memory::desc({M, N}, dt::bf16, dnnl::memory::dims{N, 1});
  p.bias = dnnl::memory::desc({1, N}, dt::bf16, dnnl::memory::dims{N, 1});
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto desc = key[7] ? dnnl::matmul::desc(p.a, p.b, p.bias, p.c) : dnnl::matmul::desc(p.a, p.b, p.c);
    const dnnl::matmul::primitive_desc pd(desc, attr, st.engine);
    p.scratch = pd.scratchpad_desc();
    p.prim = std::make_unique<dnnl::matmul>(pd);
  } catch (const dnnl::error&) {
    p.prim.reset();  // LibTorch's operators instead
  }
  return st.plans.emplace(key, std::move(p)).first->second;
}

}  // namespace

bool onednn_bf16_gemm_available() {
  static const bool cpu =
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return cpu && at::globalContext().userEnabledMkldnn();
}

torch::Tensor onednn_bf16_mm(const torch::Tensor& a_in, const torch::Tensor& b_in, const torch::Tensor& bias) {
  if (!onednn_bf16_gemm_available() || a_in.dim() != 2 || b_in.dim() != 2 || !a_in.device().is_cpu() ||
      !b_in.device().is_cpu() || a_in.scalar_type() != torch::kBFloat16 || b_in.scalar_type() != torch::kBFloat16 ||
      a_in.size(1) != b_in.size(0))
    return {};
  const auto M = a_in.size(0), K = a_in.size(1), N = b_in.size(1);
  if (M * K * N <= kMinProduct || !plain_strides(a_in) || !plain_strides(b_in)) return {};
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != N || bias.scalar_type() != torch::kBFloat16 ||
                         !bias.is_contiguous() || !bias.device().is_cpu()))
    return {};
  const auto a = dense_operand(a_in), b = dense_operand(b_in);
  auto& st = thread_state();
  const Key key{
      M, K, N, a.stride(0), a.stride(1), b.stride(0), b.stride(1), bias.defined() ? 1 : 0, at::get_num_threads()};
  Plan& p = plan_for(st, key);
  if (!p.prim) return {};
  auto out = torch::empty({M, N}, a.options());
  if (st.scratch.size() < p.scratch.get_size()) st.scratch.resize(p.scratch.get_size());
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, dnnl::memory(p.a, st.engine, a.data_ptr())},
                                             {DNNL_ARG_WEIGHTS, dnnl::memory(p.b, st.engine, b.data_ptr())},
                                             {DNNL_ARG_DST, dnnl::memory(p.c, st.engine, out.data_ptr())}};
  if (p.scratch.get_size() > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch, st.engine, st.scratch.data()));
  if (bias.defined()) args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias, st.engine, bias.data_ptr()));
  try {
    p.prim->execute(st.stream, args);
    st.stream.wait();
  } catch (const dnnl::error&) {
    // A primitive that was built but cannot run here: this shape goes to LibTorch's operators from
    // now on (out is new, so nothing half-written escapes).
    p.prim.reset();
    return {};
  }
  return out;
}

}  // namespace arcal

#else  // built without oneDNN's headers: LibTorch's products everywhere

namespace arcal {

bool onednn_bf16_gemm_available() { return false; }

torch::Tensor onednn_bf16_mm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) { return {}; }

}  // namespace arcal

#endif
