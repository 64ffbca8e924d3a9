#include "model/ar_vit.hpp"

#include <cmath>

#include "core/check.hpp"

namespace arcal {

namespace F = torch::nn::functional;

MultiHeadAttentionImpl::MultiHeadAttentionImpl(int dim, int heads) : heads_(heads) {
  qkv_ = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& x) {
  const auto B = x.size(0), T = x.size(1), D = x.size(2);
  const auto hd = D / heads_;
  // (B,T,3D) -> (3,B,H,T,hd)
  auto qkv = qkv_(x).reshape({B, T, 3, heads_, hd}).permute({2, 0, 3, 1, 4});
  auto q = qkv[0], k = qkv[1], v = qkv[2];
  auto att = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd))), -1);
  auto out = torch::matmul(att, v).transpose(1, 2).reshape({B, T, D});  // (B,T,D)
  return proj_(out);
}

MlpImpl::MlpImpl(int dim, int hidden) {
  fc1_ = register_module("fc1", torch::nn::Linear(dim, hidden));
  fc2_ = register_module("fc2", torch::nn::Linear(hidden, dim));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) { return fc2_(torch::gelu(fc1_(x))); }

ARViTImpl::ARViTImpl(const ModelConfig& config) : config_(config) {
  validate_model_config(config_);
  const int d = config_.dim;
  patch_embed_ = register_module(
      "patch_embed",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(config_.channels, d, config_.patch).stride(config_.patch)));
  cls_token_ = register_parameter("cls_token", torch::zeros({1, 1, d}));
  pos_embed_ = register_parameter("pos_embed", torch::zeros({1, config_.tokens(), d}));
  norms_ = register_module("norms", torch::nn::ModuleList());
  for (int l = 0; l < config_.layers(); ++l)
    norms_->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(config_.norm_eps)));
  for (int b = 0; b < config_.depth; ++b) {
    attn_.push_back(register_module("attn" + std::to_string(b), MultiHeadAttention(d, config_.heads)));
    mlp_.push_back(register_module("mlp" + std::to_string(b), Mlp(d, d * config_.mlp_ratio)));
  }
  final_norm_ = register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(config_.norm_eps)));
  head_ = register_module("head", torch::nn::Linear(d, config_.classes));
  if (config_.residual != ResidualMode::Standard) {
    const int P = config_.routing_points();
    pseudo_query_ = register_parameter("pseudo_query", torch::zeros({P, d}));
    key_gain_ = register_parameter("key_gain", torch::ones({P, d}));
  }
  // ViT-style initialisation: small normal weights for tokens and linear layers, zero biases.
  torch::NoGradGuard guard;
  torch::nn::init::normal_(pos_embed_, 0.0, 0.02);
  torch::nn::init::normal_(cls_token_, 0.0, 0.02);
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* lin = m->as<torch::nn::Linear>()) {
      torch::nn::init::normal_(lin->weight, 0.0, 0.02);
      torch::nn::init::zeros_(lin->bias);
    }
  }
}

torch::Tensor ARViTImpl::embed(const torch::Tensor& images) {
  auto x = patch_embed_(images);             // (B,d,H/p,W/p)
  x = x.flatten(2).transpose(1, 2);          // (B,T-1,d)
  auto cls = cls_token_.expand({x.size(0), 1, x.size(2)});
  return torch::cat({cls, x}, 1) + pos_embed_;  // (B,T,d)
}

torch::Tensor ARViTImpl::sublayer(int l, const torch::Tensor& h) {
  auto normed = norms_[l]->as<torch::nn::LayerNorm>()->forward(h);
  return (l % 2 == 0) ? attn_[l / 2]->forward(normed) : mlp_[l / 2]->forward(normed);
}

torch::Tensor ARViTImpl::rms_normalise(const torch::Tensor& v) const {
  // Gainless RMSNorm; the learnable gain of point p is folded into its query: w_p . (g_p * n) = (w_p*g_p) . n.
  return v * torch::rsqrt(v.pow(2).mean(-1, /*keepdim=*/true) + config_.norm_eps);
}

torch::Tensor ARViTImpl::route(int point, const std::vector<torch::Tensor>& scores,
                               const std::vector<torch::Tensor>& values, RoutingCapture* capture,
                               const RoutingAblation* ablation) {
  // scores: S tensors (B,T); values: S tensors (B,T,d). Softmax over sources in fp32.
  auto logits = torch::stack(scores, 0);  // (S,B,T)
  if (logits.scalar_type() != torch::kDouble) logits = logits.to(torch::kFloat);  // at least fp32
  auto alpha = torch::softmax(logits, 0);
  if (ablation && !ablation->empty() && point < static_cast<int>(ablation->drop_sources.size()) &&
      !ablation->drop_sources[point].empty()) {
    auto keep = torch::ones({logits.size(0), 1, 1}, alpha.options());
    for (int s : ablation->drop_sources[point])
      if (s >= 0 && s < logits.size(0)) keep[s] = 0.0;
    alpha = alpha * keep;
    alpha = alpha / alpha.sum(0, true).clamp_min(1e-30);
  }
  if (capture) capture->alpha.push_back(alpha.detach());
  auto V = torch::stack(values, 0);                                // (S,B,T,d)
  return (alpha.to(V.scalar_type()).unsqueeze(-1) * V).sum(0);     // (B,T,d)
}

torch::Tensor ARViTImpl::forward(const torch::Tensor& images, RoutingCapture* capture,
                                 const RoutingAblation* ablation) {
  const int L = config_.layers();
  auto v0 = embed(images);
  torch::Tensor stream;
  if (config_.residual == ResidualMode::Standard) {
    stream = v0;
    for (int l = 0; l < L; ++l) stream = stream + sublayer(l, stream);
  } else {
    const int S = config_.effective_block_size();
    auto U = pseudo_query_ * key_gain_;  // (P,d): one effective query per routing point
    // Completed sources b_0..b_{n-1}: their values and their scores against every point, computed
    // once when the source completes (the key is RMS-normalised once, not at every point).
    std::vector<torch::Tensor> done_values, done_scores;  // (B,T,d), (B,T,P)
    auto complete = [&](const torch::Tensor& v) {
      done_values.push_back(v);
      done_scores.push_back(torch::matmul(rms_normalise(v), U.t()));
    };
    complete(v0);
    torch::Tensor partial;  // b_n^partial, undefined at a block boundary
    std::vector<torch::Tensor> scores, values;
    auto gather = [&](int point) {
      scores.clear();
      values.clear();
      for (std::size_t i = 0; i < done_values.size(); ++i) {
        scores.push_back(done_scores[i].select(-1, point));
        values.push_back(done_values[i]);
      }
      if (partial.defined()) {
        scores.push_back(torch::matmul(rms_normalise(partial), U[point]));
        values.push_back(partial);
      }
    };
    for (int l = 0; l < L; ++l) {
      if (l % S == 0 && partial.defined()) {
        complete(partial);
        partial = torch::Tensor();
      }
      gather(l);
      auto h = route(l, scores, values, capture, ablation);
      auto out = sublayer(l, h);
      partial = partial.defined() ? partial + out : out;
    }
    gather(L);
    stream = route(L, scores, values, capture, ablation);
  }
  auto cls = final_norm_(stream).select(1, 0);  // (B,d) at the CLS token
  return head_(cls);
}

std::int64_t parameter_count(torch::nn::Module& module) {
  std::int64_t n = 0;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) n += p.numel();
  return n;
}

}  // namespace arcal
