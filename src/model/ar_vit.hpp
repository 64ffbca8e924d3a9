// AR-ViT: a vision transformer whose residual connections are Attention Residuals
// (method.md §1): Full AttnRes, Block AttnRes, or the standard-residual twin. ar-vit-tiny and
// ar-deit-small are this architecture; for ar-swin-tiny ARViT delegates to ARSwin (ar_swin.hpp) and
// for the language model ar-lm-tiny to ARLM (ar_lm.hpp), so the trainer, trace export and
// interventions hold one model type for every preset.
// Shapes: images (B,C,H,W) -> tokens (B,T,d) with T = patches + 1 (CLS first) -> logits (B,K);
// language model: tokens (B,T) int64 -> next-token logits (B,T,K).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/ar_lm.hpp"
#include "model/ar_swin.hpp"
#include "model/attnres.hpp"
#include "model/config.hpp"
#include "model/layers.hpp"

namespace arcal {

class ARViTImpl : public torch::nn::Module {
 public:
  explicit ARViTImpl(const ModelConfig& config);

  /// images (B,C,H,W) float -> logits (B,K); for arch "lm" tokens (B,T) int64 -> logits (B,T,K).
  /// With `capture`, records routing weights per point.
  torch::Tensor forward(const torch::Tensor& images, RoutingCapture* capture = nullptr,
                        const RoutingAblation* ablation = nullptr);

  const ModelConfig& config() const { return config_; }

  /// Sublayer l's raw output (ViT and LM architectures) f_l(h) = Attn(LN(h)) or MLP(LN(h)).
  /// first_token_only (ViT, an attention sublayer): its output at token 0 only, (B,1,d).
  torch::Tensor sublayer(int l, const torch::Tensor& h, bool first_token_only = false);

  /// Token embedding v_0: patches + CLS + positions, (B,T,d).
  torch::Tensor embed(const torch::Tensor& images);

  /// Sets the eval-mode attention backend of every attention layer (layers.hpp; empty = standard).
  /// ViT and LM architectures: throws InputError for ar-swin-tiny, whose window attention has no hook.
  void set_attention_backend(const AttentionBackend& backend);

 private:
  ModelConfig config_;
  ARSwin swin_{nullptr};  // set for arch "swin"; then every other member stays empty
  ARLM lm_{nullptr};      // set for arch "lm"; likewise
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

/// AR-ViT's first-token cut (ARViTImpl::forward, training mode without a capture): on unless the environment sets
/// ARCAL_FIRST_TOKEN_CUT=0; set_first_token_cut overrides both. Off only to measure it
/// (bench/bench_step's "uncut" case): the cut changes no value and no gradient.
bool first_token_cut_enabled();
void set_first_token_cut(bool enabled);

}  // namespace arcal
