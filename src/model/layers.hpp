// Transformer layers shared by the presets: global multi-head self-attention (ViT/DeiT) and the
// two-layer GELU MLP (every preset). Shapes in comments: B batch, T tokens, d width.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace arcal {

/// An inference-time replacement for softmax(q k^T / sqrt(hd) + mask) v: q, k, v (B,H,T,hd) ->
/// (B,H,T,hd); `causal` is true in a causal layer (the language model's decoder: token i sees keys
/// 0..i), and a backend must then honour the mask. Attention layers call it only in eval mode
/// (training numerics never change); empty = the standard product. cedar/torch/cedar_torch.hpp
/// makes one from the CEDAR kernel.
using AttentionBackend =
    std::function<torch::Tensor(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal)>;

/// LayerNorm in at least fp32. Under autocast a norm may receive bf16/fp16 activations while its
/// weights stay fp32; LibTorch 1.13's CPU layer_norm rejects that mix, and AMP keeps norms in fp32.
/// With the fused operators on a CPU, an affine norm over the last axis runs as fused_layer_norm
/// (model/fused.hpp).
torch::Tensor layer_norm_fp32(torch::nn::LayerNorm& norm, const torch::Tensor& x);

/// layer_norm_fp32 for a norm whose output only feeds a linear (the sublayers' pre-norms). Under CPU
/// bf16 autocast that linear casts its float input to bf16; with the fused operators the norm writes
/// bf16 itself (bitwise that cast) and reads the linear's bf16 input gradient as it is, so neither
/// pass converts. Anywhere else it is layer_norm_fp32.
torch::Tensor layer_norm_before_linear(torch::nn::LayerNorm& norm, const torch::Tensor& x);

/// Non-overlapping patch embedding: conv (d, C, p, p) with stride p on (B,C,H,W) images ->
/// (B, (H/p)(W/p), d), patches in row-major order (the conv's output flattened and transposed). With
/// the fused operators on a CPU it runs as one matrix product over the patches viewed as rows of
/// C p p pixels (the same parameters: weight viewed as (d, C p p)): at AR-ViT-tiny's shape the conv's
/// forward and backward took 5.2 ms per step, the product 0.75 ms (docs/perf-log.md, "Two more cuts").
torch::Tensor patch_embed_tokens(torch::nn::Conv2d& conv, const torch::Tensor& images);

/// y = x W^T + b through ATen's linear, which runs a contiguous (B,T,d) input as one addmm over its
/// B T rows with the bias inside the product. LibTorch's C++ `nn::Linear::forward` runs a 3-D input as
/// matmul and then `+= bias`, a second pass over the output, and under bf16 autocast that pass casts
/// the fp32 bias into the bf16 output element by element (about 0.1 ms at (2176, 192) on one core,
/// a third of the product itself). Same parameters, same function; autocast applies as to any linear.
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x);

class MultiHeadAttentionImpl : public torch::nn::Module {
 public:
  /// causal: token i attends to tokens 0..i only (the language model's decoder mask).
  MultiHeadAttentionImpl(int dim, int heads, bool causal = false);
  torch::Tensor forward(const torch::Tensor& x);  // (B,T,d) -> (B,T,d)
  /// The output at token 0 only, (B,T,d) -> (B,1,d): token 0's query still reads every key, and the
  /// output projection runs on that row alone (a model whose loss reads token 0 only needs no more).
  torch::Tensor forward_first_token(const torch::Tensor& x);
  /// Used in eval mode only (see AttentionBackend); an empty function restores the standard product.
  void set_attention_backend(AttentionBackend backend) { backend_ = std::move(backend); }

 private:
  torch::Tensor heads(const torch::Tensor& x);  // every head's output before the projection, (B,T,d)
  int heads_;
  bool causal_;
  AttentionBackend backend_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(MultiHeadAttention);

class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int dim, int hidden);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(Mlp);

}  // namespace arcal
