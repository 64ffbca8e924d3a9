// AR-Swin: a Swin Transformer (Liu et al. 2021) whose residual connections inside each stage are
// Attention Residuals (method.md §1): the stage input (after patch embedding, or after patch
// merging) is that stage's v_0, every attention and MLP sublayer is a layer, and each stage ends
// with its own final aggregation op. Window attention with shifted windows (shift = window / 2 on
// odd blocks), a learned relative position bias and the official -100 attention mask.
// Shapes: images (B,C,H,W) -> stage s tokens (B, r_s * r_s, C_s) -> mean pool -> logits (B,K).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "model/attnres.hpp"
#include "model/config.hpp"
#include "model/layers.hpp"

namespace arcal {

/// (B,H,W,C) -> (B * H/w * W/w, w*w, C): non-overlapping w x w windows, row-major within a window.
/// H and W must be multiples of w (checked by the model configuration).
torch::Tensor window_partition(const torch::Tensor& x, int window);

/// Inverse of window_partition: (B * H/w * W/w, w*w, C) -> (B,H,W,C).
torch::Tensor window_reverse(const torch::Tensor& windows, int window, int height, int width);

/// (w*w, w*w) int64: index into the ((2w-1)^2, heads) bias table for every query/key pair of a
/// window, (dy + w - 1) * (2w - 1) + (dx + w - 1) as in the official code.
torch::Tensor relative_position_index(int window);

/// (nW, w*w, w*w) float: 0 between tokens of the same region of the cyclically shifted grid, -100
/// between tokens that the shift made neighbours (the official Swin mask).
torch::Tensor shifted_window_mask(int height, int width, int window, int shift);

class WindowAttentionImpl : public torch::nn::Module {
 public:
  WindowAttentionImpl(int dim, int heads, int window);
  /// x (B*nW, w*w, C), mask (nW, w*w, w*w) or undefined -> (B*nW, w*w, C).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);

 private:
  int heads_, window_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
  torch::Tensor bias_table_;  // ((2w-1)^2, heads)
  torch::Tensor bias_index_;  // (w*w, w*w) buffer
};
TORCH_MODULE(WindowAttention);

/// Swin patch merging: 2x2 neighbours concatenated (x00, x10, x01, x11 order), LayerNorm(4C),
/// then a bias-free Linear 4C -> 2C. (B, r*r, C) -> (B, r/2 * r/2, 2C).
class PatchMergingImpl : public torch::nn::Module {
 public:
  PatchMergingImpl(int dim, double eps);
  torch::Tensor forward(const torch::Tensor& x, int resolution);

 private:
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear reduction_{nullptr};
};
TORCH_MODULE(PatchMerging);

class ARSwinImpl : public torch::nn::Module {
 public:
  explicit ARSwinImpl(const ModelConfig& config);

  /// images (B,C,H,W) -> logits (B,K). Routing points run stage by stage (global indices).
  torch::Tensor forward(const torch::Tensor& images, RoutingCapture* capture = nullptr,
                        const RoutingAblation* ablation = nullptr);

  /// Sublayer l of stage s on h (B, r_s * r_s, C_s): shifted-window attention (even l) or MLP.
  torch::Tensor sublayer(int stage, int l, const torch::Tensor& h);

 private:
  ModelConfig config_;
  torch::nn::Conv2d patch_embed_{nullptr};
  torch::nn::LayerNorm patch_norm_{nullptr};
  std::vector<std::vector<torch::nn::LayerNorm>> norms_;  // [stage][sublayer]
  std::vector<std::vector<WindowAttention>> attn_;        // [stage][block]
  std::vector<std::vector<Mlp>> mlp_;                     // [stage][block]
  std::vector<PatchMerging> merges_;                      // before stages 1..n-1
  std::vector<torch::Tensor> masks_;                      // per stage; undefined without shift
  std::vector<torch::Tensor> pseudo_query_, key_gain_;    // per stage (L_s + 1, C_s)
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(ARSwin);

}  // namespace arcal
