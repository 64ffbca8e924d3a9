// AR-ViT: a vision transformer whose residual connections are Attention Residuals
// (method.md §1): Full AttnRes, Block AttnRes, or the standard-residual twin.
// Shapes: images (B,C,H,W) -> tokens (B,T,d) with T = patches + 1 (CLS first) -> logits (B,K).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/config.hpp"

namespace arcal {

/// Filled by forward() when passed: for every routing point p, alpha (S_p,B,T), detached.
struct RoutingCapture {
  std::vector<torch::Tensor> alpha;
};

/// A routing intervention: at the listed points, zero the routing weight of the listed source
/// indices and renormalise (method.md §7). Empty = no intervention.
struct RoutingAblation {
  std::vector<std::vector<int>> drop_sources;  ///< [P] lists of source indices to zero
  bool empty() const { return drop_sources.empty(); }
};

class MultiHeadAttentionImpl : public torch::nn::Module {
 public:
  MultiHeadAttentionImpl(int dim, int heads);
  torch::Tensor forward(const torch::Tensor& x);  // (B,T,d) -> (B,T,d)

 private:
  int heads_;
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

class ARViTImpl : public torch::nn::Module {
 public:
  explicit ARViTImpl(const ModelConfig& config);

  /// images (B,C,H,W) float -> logits (B,K). With `capture`, records routing weights per point.
  torch::Tensor forward(const torch::Tensor& images, RoutingCapture* capture = nullptr,
                        const RoutingAblation* ablation = nullptr);

  const ModelConfig& config() const { return config_; }

  /// Sublayer l's raw output f_l(h) = Attn(LN(h)) or MLP(LN(h)).
  torch::Tensor sublayer(int l, const torch::Tensor& h);

  /// Token embedding v_0: patches + CLS + positions, (B,T,d).
  torch::Tensor embed(const torch::Tensor& images);

 private:
  torch::Tensor route(int point, const std::vector<torch::Tensor>& scores,
                      const std::vector<torch::Tensor>& values, RoutingCapture* capture,
                      const RoutingAblation* ablation);
  torch::Tensor rms_normalise(const torch::Tensor& v) const;

  ModelConfig config_;
  torch::nn::Conv2d patch_embed_{nullptr};
  torch::Tensor cls_token_, pos_embed_;
  torch::nn::ModuleList norms_;  // one pre-norm per sublayer
  std::vector<MultiHeadAttention> attn_;
  std::vector<Mlp> mlp_;
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear head_{nullptr};
  torch::Tensor pseudo_query_;  // (P,d), zero-initialised: routing starts exactly uniform
  torch::Tensor key_gain_;      // (P,d), RMSNorm gains, initialised to 1
};
TORCH_MODULE(ARViT);

/// Number of trainable parameters.
std::int64_t parameter_count(torch::nn::Module& module);

}  // namespace arcal
