#include "model/layers.hpp"

#include <ATen/autocast_mode.h>

#include "core/check.hpp"
#include "model/fused.hpp"

namespace arcal {

namespace {

torch::Tensor layer_norm_at_least_fp32(torch::nn::LayerNorm& norm, const torch::Tensor& x_in, bool feeds_linear) {
  const auto t = x_in.scalar_type();
  const auto x = t == torch::kBFloat16 || t == torch::kHalf ? x_in.to(torch::kFloat) : x_in;
  const auto& opt = norm->options;
  const auto& w = norm->weight;
  if (fused_operators_enabled() && x.device().is_cpu() && opt.elementwise_affine() &&
      opt.normalized_shape().size() == 1 && x.dim() >= 1 && x.size(-1) == opt.normalized_shape()[0] &&
      (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble) && w.scalar_type() == x.scalar_type() &&
      norm->bias.defined() && norm->bias.scalar_type() == x.scalar_type()) {
    const bool bf16_out = feeds_linear && x.scalar_type() == torch::kFloat &&
                          at::autocast::is_autocast_enabled(at::kCPU) &&
                          at::autocast::get_autocast_dtype(at::kCPU) == at::kBFloat16;
    return fused_layer_norm(x, w, norm->bias, opt.eps(), bf16_out);
  }
  return norm->forward(x);
}

}  // namespace

torch::Tensor layer_norm_fp32(torch::nn::LayerNorm& norm, const torch::Tensor& x) {
  return layer_norm_at_least_fp32(norm, x, false);
}

torch::Tensor layer_norm_before_linear(torch::nn::LayerNorm& norm, const torch::Tensor& x) {
  return layer_norm_at_least_fp32(norm, x, true);
}

torch::Tensor patch_embed_tokens(torch::nn::Conv2d& conv, const torch::Tensor& images) {
  const auto& w = conv->weight;  // (d, C, p, p)
  const auto p = w.size(2);
  const bool exact_tiles = images.dim() == 4 && w.size(3) == p && images.size(1) == w.size(1) &&
                           images.size(2) % p == 0 && images.size(3) % p == 0;
  const auto& stride = conv->options.stride();
  const auto* pad = std::get_if<torch::ExpandingArray<2>>(&conv->options.padding());
  const bool plain = stride->at(0) == p && stride->at(1) == p && pad && (*pad)->at(0) == 0 && (*pad)->at(1) == 0 &&
                     conv->options.dilation()->at(0) == 1 && conv->options.dilation()->at(1) == 1 &&
                     conv->options.groups() == 1;
  if (!(fused_operators_enabled() && images.device().is_cpu() && exact_tiles && plain))
    return conv->forward(images).flatten(2).transpose(1, 2);
  const auto B = images.size(0), C = images.size(1), gh = images.size(2) / p, gw = images.size(3) / p;
  auto patches = images.reshape({B, C, gh, p, gw, p}).permute({0, 2, 4, 1, 3, 5}).reshape({B, gh * gw, C * p * p});
  if (!conv->options.bias()) return torch::linear(patches, w.reshape({w.size(0), C * p * p}));
  return fused_linear(patches, w.reshape({w.size(0), C * p * p}), conv->bias);
}

torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return fused_linear(x, layer->weight, layer->bias);
}

MultiHeadAttentionImpl::MultiHeadAttentionImpl(int dim, int heads, bool causal) : heads_(heads), causal_(causal) {
  qkv_ = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& x) { return linear(proj_, heads(x)); }

torch::Tensor MultiHeadAttentionImpl::forward_first_token(const torch::Tensor& x) {
  return linear(proj_, heads(x).select(1, 0)).unsqueeze(1);  // (B,d) rows: one addmm
}

torch::Tensor MultiHeadAttentionImpl::heads(const torch::Tensor& x) {
  const auto B = x.size(0), T = x.size(1), D = x.size(2);
  const auto hd = D / heads_;
  if (!(backend_ && !is_training()) && fused_operators_enabled() && x.device().is_cpu()) {
    // One operator for every head's softmax(q k^T / sqrt(hd)) v, forward and backward, in fp32 at
    // least (under bf16 autocast the products are tiny; the projections stay in bf16, and the
    // operator reads and writes bf16 itself).
    auto qkv = linear(qkv_, x);
    const auto t = qkv.scalar_type();
    auto heads_out = fused_self_attention(fused_storage_dtype(t) ? qkv : qkv.to(torch::kFloat), heads_, causal_);
    return heads_out.scalar_type() == t ? heads_out : heads_out.to(t);
  }
  if (!(backend_ && !is_training())) return composite_self_attention(linear(qkv_, x), heads_, causal_);
  // (B,T,3D) -> (3,B,H,T,hd) for the evaluation backend (e.g. CEDAR), which returns (B,H,T,hd)
  auto qkv = linear(qkv_, x).reshape({B, T, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
  return backend_(qkv[0], qkv[1], qkv[2], causal_).transpose(1, 2).reshape({B, T, D});  // (B,T,D)
}

MlpImpl::MlpImpl(int dim, int hidden) {
  fc1_ = register_module("fc1", torch::nn::Linear(dim, hidden));
  fc2_ = register_module("fc2", torch::nn::Linear(hidden, dim));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  auto h = linear(fc1_, x);
  const auto t = h.scalar_type();
  // The fused GELU (model/fused.hpp) on float, double and (under autocast) bf16 CPU tensors.
  const bool fused = fused_operators_enabled() && h.device().is_cpu() && fused_storage_dtype(t);
  return linear(fc2_, fused ? fused_gelu(h) : torch::gelu(h));
}

}  // namespace arcal
