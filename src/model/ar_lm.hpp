// AR-LM: a decoder-only byte-level language model whose residual connections are Attention
// Residuals (method.md §1; issue 27): token embedding plus learned positions (none for
// ar-lm-tiny-nope, which therefore runs past its training context), then causal
// self-attention and GELU MLP sublayers through the same attnres_stack as AR-ViT (Full AttnRes,
// Block AttnRes with block size S, or the standard-residual twin), a final LayerNorm and a
// next-token head (tied to the embedding for ar-lm-tiny). Every token is a routing "example": the
// routing weights are per token, alpha (S_p,B,T) at every point.
// Shapes: tokens (B,T) int64 in [0, 256), T <= context -> h (B,T,d) -> logits (B,T,256); the logits
// at position t predict token t+1.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/attnres.hpp"
#include "model/config.hpp"
#include "model/layers.hpp"

namespace arcal {

class ARLMImpl : public torch::nn::Module {
 public:
  /// config.arch must be "lm" (make_lm_config).
  explicit ARLMImpl(const ModelConfig& config);

  /// tokens (B,T) int64 -> next-token logits (B,T,K). Throws InputError for another dtype or
  /// rank, T > context with learned positions (NoPE runs at any T), or a token outside [0, K).
  torch::Tensor forward(const torch::Tensor& tokens, RoutingCapture* capture = nullptr,
                        const RoutingAblation* ablation = nullptr);

  const ModelConfig& config() const { return config_; }

  /// Sets the eval-mode attention backend of every (causal) attention layer (layers.hpp).
  void set_attention_backend(const AttentionBackend& backend);

  /// Sublayer l's raw output f_l(h) = causal Attn(LN(h)) (l even) or MLP(LN(h)) (l odd).
  torch::Tensor sublayer(int l, const torch::Tensor& h);

 private:
  ModelConfig config_;
  torch::nn::Embedding tok_embed_{nullptr};
  torch::Tensor pos_embed_;      // (context, d); undefined without positions (NoPE)
  torch::nn::ModuleList norms_;  // one pre-norm per sublayer
  std::vector<MultiHeadAttention> attn_;
  std::vector<Mlp> mlp_;
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear head_{nullptr};  // absent when tie_weights: logits = h E^T + head_bias_
  torch::Tensor head_bias_;          // (K) when tied
  torch::Tensor pseudo_query_;       // (P,d), zero-initialised: routing starts exactly uniform
  torch::Tensor key_gain_;           // (P,d), RMSNorm gains, initialised to 1
};
TORCH_MODULE(ARLM);

}  // namespace arcal
