// Fused training operators for the small-token presets: the AttnRes routing points (scores, softmax
// over sources and weighted sum), the multi-head self-attention core, the MLP's GELU, LayerNorm and
// the linear layers, each one operator with its own backward (a torch::autograd::Function over hand-written loops).
// LibTorch's composite spends a training step on tens of thousands of tiny calls at 17 tokens x 64 dimensions
// (bench/README.md "profile_train.py"): stacking every source at every routing point, and the attention's batched
// products computed one matrix at a time. The fused forms compute the same functions (float rounding aside;
// tests/model/ test_fused.cpp checks values and gradients against LibTorch's autograd) in a handful of calls.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace arcal {

/// Whether the models use the fused operators on CPU tensors (default true; on other devices they
/// always use LibTorch's composite). ARCAL_FUSED=0 in the environment
/// turns them off for the whole process (the LibTorch composite instead: for profiles and the
/// before/after benchmark); set_fused_operators overrides both.
bool fused_operators_enabled();
void set_fused_operators(bool enabled);

/// Whether t is a dtype the fused GELU, self-attention and routing sources take as it is: float,
/// double or bfloat16 (bf16: computed in float, as under autocast). Callers convert others to float.
bool fused_storage_dtype(torch::ScalarType t);

/// The self-attention core of every head from the packed projection qkv (B,T,3D) = [q | k | v],
/// head h in columns h*hd .. (h+1)*hd of each, hd = D / heads: softmax(q k^T / sqrt(hd)) v per
/// head, returned with the heads side by side (B,T,D), which is what the output projection reads.
/// causal: query i attends to keys 0..i only (a decoder's mask; the others get weight exactly 0).
/// float, double or bfloat16; differentiable in qkv. bf16 (the qkv projection's output under
/// autocast) is computed in float and the output and the gradient are rounded to bf16 (ties to even):
/// bitwise the float operator on qkv.to(float) followed by .to(bf16), without those two passes (and
/// their backward) around it.
torch::Tensor fused_self_attention(const torch::Tensor& qkv, int heads, bool causal = false);

/// The same softmax(q k^T / sqrt(hd)) v in LibTorch's own operators (matmul, softmax; any device and
/// dtype): the models' path where the fused operator does not run (ARCAL_FUSED=0, CUDA) and
/// bench_step's reference for it.
torch::Tensor composite_self_attention(const torch::Tensor& qkv, int heads, bool causal = false);

/// Exact GELU, x Phi(x) (erf form, as torch::gelu), elementwise, with its own backward: float,
/// double or bfloat16 CPU tensors of any shape. In float, Phi comes from a polynomial fit of erfc's scaled form
/// and one exponential shared with phi (relative error below 1e-6 for |x| <= 5, tails included);
/// it vectorises. In double from std::erfc. bfloat16 (the first MLP linear's output under autocast):
/// the float computation on the widened input rounded to bf16 (ties to even), as LibTorch's bf16
/// gelu, read from a table of all 65536 bf16 inputs that the float kernel fills once; the saved
/// gelu'(x) is bf16 as well, so the input gradient is within 2 bf16 ulps of LibTorch's.
torch::Tensor fused_gelu(const torch::Tensor& x);

/// torch::linear(x, weight, bias) for a 2-d or contiguous 3-d CPU input with a bias (float, double,
/// or under bf16 autocast), as one operator with its own backward: the same GEMMs and sums as
/// LibTorch's addmm and its backward, so values and gradients are bitwise torch::linear's (autocast
/// included), without the broadcast copy of the bias and the autograd nodes of autocast's casts, the
/// transpose and the views. Other inputs go to torch::linear.
torch::Tensor fused_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// LayerNorm over the last axis with an affine weight and bias (d,), as torch::layer_norm(x, {d},
/// weight, bias, eps), with its own backward (differentiable in all three): float or double CPU
/// tensors, weight and bias of x's dtype. The same values on any thread count. bf16_output (float x
/// only; a norm whose output feeds a linear under bf16 autocast): y is rounded to bf16 (ties to even),
/// bitwise the float norm followed by .to(bf16), and a bf16 gradient is read as it is, so neither pass
/// converts.
torch::Tensor fused_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               double eps, bool bf16_output = false);

/// The routing points of one AttnRes forward pass in fused form (attnres_stack's path when the fused
/// operators are on). Each point is one operator: its sources' scores (the RMS-normalised source
/// dotted with the point's query), the softmax over sources and the weighted sum, forward and
/// backward. Its backward adds each source's gradient into one buffer per source in place; a tap on
/// the source hands the sum on once every point that read it is done. The composite instead makes
/// one (B,T,d) gradient per (point, source) that autograd then adds up, plus a dozen small calls per
/// point for the scores.
class RoutingBank {
 public:
  RoutingBank();
  /// Registers a source (B,T,d) (float or double, CPU; every source the same shape and dtype) and
  /// returns its slot.
  int add(const torch::Tensor& source);
  /// The routing point over the sources in `slots` with query u (d, the sources' dtype): h (B,T,d)
  /// = sum_s alpha_s v_s with alpha = softmax_s(rms_normalise(v_s, eps) . u), and alpha (S,B,T),
  /// not differentiable. Differentiable in u and in every source.
  std::pair<torch::Tensor, torch::Tensor> route(const torch::Tensor& u, const std::vector<int>& slots, double eps);

 private:
  c10::IValue bank_;                   // a capsule holding the per-source gradient buffers
  std::vector<torch::Tensor> tapped_;  // [slot] the sources as the points read them
};

}  // namespace arcal
