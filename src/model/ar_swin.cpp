#include "model/ar_swin.hpp"

#include <cmath>

#include "core/check.hpp"

namespace arcal {

torch::Tensor window_partition(const torch::Tensor& x, int w) {
  const auto B = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  ARCAL_ASSERT(H % w == 0 && W % w == 0, "window_partition: grid not divisible by the window");
  return x.view({B, H / w, w, W / w, w, C}).permute({0, 1, 3, 2, 4, 5}).reshape({-1, w * w, C});
}

torch::Tensor window_reverse(const torch::Tensor& windows, int w, int H, int W) {
  const auto C = windows.size(-1);
  const auto B = windows.size(0) / ((H / w) * (W / w));
  return windows.reshape({B, H / w, W / w, w, w, C}).permute({0, 1, 3, 2, 4, 5}).reshape({B, H, W, C});
}

torch::Tensor relative_position_index(int w) {
  auto ys = torch::arange(w, torch::kLong), xs = torch::arange(w, torch::kLong);
  auto grid = torch::meshgrid({ys, xs}, "ij");
  auto cy = grid[0].flatten(), cx = grid[1].flatten();    // (N)
  auto dy = cy.unsqueeze(1) - cy.unsqueeze(0) + (w - 1);  // (N,N) in [0, 2w-2]
  auto dx = cx.unsqueeze(1) - cx.unsqueeze(0) + (w - 1);
  return dy * (2 * w - 1) + dx;
}

torch::Tensor shifted_window_mask(int H, int W, int w, int shift) {
  auto img = torch::zeros({1, H, W, 1});
  const int hb[4] = {0, H - w, H - shift, H};
  const int wb[4] = {0, W - w, W - shift, W};
  float region = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      img.narrow(1, hb[i], hb[i + 1] - hb[i]).narrow(2, wb[j], wb[j + 1] - wb[j]).fill_(region);
      region += 1;
    }
  auto mw = window_partition(img, w).squeeze(-1);  // (nW, N)
  auto diff = mw.unsqueeze(1) - mw.unsqueeze(2);   // (nW, N, N)
  return torch::where(diff != 0, torch::full_like(diff, -100.0f), torch::zeros_like(diff));
}

WindowAttentionImpl::WindowAttentionImpl(int dim, int heads, int window) : heads_(heads), window_(window) {
  qkv_ = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
  bias_table_ =
      register_parameter("relative_position_bias_table", torch::zeros({(2 * window - 1) * (2 * window - 1), heads}));
  bias_index_ = register_buffer("relative_position_index", relative_position_index(window));
}

torch::Tensor WindowAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const auto Bw = x.size(0), N = x.size(1), C = x.size(2);
  const auto hd = C / heads_;
  auto qkv = linear(qkv_, x).reshape({Bw, N, 3, heads_, hd}).permute({2, 0, 3, 1, 4});  // (3,Bw,h,N,hd)
  auto q = qkv[0] * (1.0 / std::sqrt(double(hd))), k = qkv[1], v = qkv[2];
  auto attn = torch::matmul(q, k.transpose(-2, -1));  // (Bw,h,N,N)
  auto bias = bias_table_.index_select(0, bias_index_.flatten()).view({N, N, heads_}).permute({2, 0, 1});
  attn = attn + bias.unsqueeze(0);
  if (mask.defined()) {
    const auto nW = mask.size(0);
    attn = (attn.view({Bw / nW, nW, heads_, N, N}) + mask.unsqueeze(1).unsqueeze(0)).view({Bw, heads_, N, N});
  }
  attn = torch::softmax(attn, -1);
  return linear(proj_, torch::matmul(attn, v).transpose(1, 2).reshape({Bw, N, C}));
}

PatchMergingImpl::PatchMergingImpl(int dim, double eps) {
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({4 * dim}).eps(eps)));
  reduction_ = register_module("reduction", torch::nn::Linear(torch::nn::LinearOptions(4 * dim, 2 * dim).bias(false)));
}

torch::Tensor PatchMergingImpl::forward(const torch::Tensor& x, int r) {
  using torch::indexing::None;
  using torch::indexing::Slice;
  const auto B = x.size(0), C = x.size(2);
  auto g = x.view({B, r, r, C});
  auto x0 = g.index({Slice(), Slice(0, None, 2), Slice(0, None, 2)});
  auto x1 = g.index({Slice(), Slice(1, None, 2), Slice(0, None, 2)});
  auto x2 = g.index({Slice(), Slice(0, None, 2), Slice(1, None, 2)});
  auto x3 = g.index({Slice(), Slice(1, None, 2), Slice(1, None, 2)});
  auto merged = torch::cat({x0, x1, x2, x3}, -1).view({B, (r / 2) * (r / 2), 4 * C});
  return reduction_(layer_norm_fp32(norm_, merged));
}

ARSwinImpl::ARSwinImpl(const ModelConfig& config) : config_(config) {
  validate_model_config(config_);
  ARCAL_ASSERT(config_.arch == "swin", "ARSwin built from a non-Swin config");
  const double eps = config_.norm_eps;
  auto ln = [eps](int d) { return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(eps)); };
  const int C0 = config_.stage_dims[0];
  patch_embed_ = register_module(
      "patch_embed",
      torch::nn::Conv2d(torch::nn::Conv2dOptions(config_.channels, C0, config_.patch).stride(config_.patch)));
  patch_norm_ = register_module("patch_norm", ln(C0));
  const int n = config_.stages();
  norms_.resize(n);
  attn_.resize(n);
  mlp_.resize(n);
  for (int s = 0; s < n; ++s) {
    const int C = config_.stage_dims[s];
    const std::string tag = "stage" + std::to_string(s) + "_";
    if (s > 0)
      merges_.push_back(register_module("merge" + std::to_string(s), PatchMerging(config_.stage_dims[s - 1], eps)));
    for (int b = 0; b < config_.stage_depths[s]; ++b) {
      for (int k = 0; k < 2; ++k) norms_[s].push_back(register_module(tag + "norm" + std::to_string(2 * b + k), ln(C)));
      attn_[s].push_back(register_module(tag + "attn" + std::to_string(b),
                                         WindowAttention(C, config_.stage_heads[s], config_.stage_window(s))));
      mlp_[s].push_back(register_module(tag + "mlp" + std::to_string(b), Mlp(C, C * config_.mlp_ratio)));
    }
    const int r = config_.stage_resolution(s), shift = config_.stage_shift(s);
    masks_.push_back(shift > 0
                         ? register_buffer(tag + "attn_mask", shifted_window_mask(r, r, config_.stage_window(s), shift))
                         : torch::Tensor());
    if (config_.residual != ResidualMode::Standard) {
      const int P = 2 * config_.stage_depths[s] + 1;
      pseudo_query_.push_back(register_parameter("pseudo_query" + std::to_string(s), torch::zeros({P, C})));
      key_gain_.push_back(register_parameter("key_gain" + std::to_string(s), torch::ones({P, C})));
    }
  }
  const int Cn = config_.stage_dims.back();
  final_norm_ = register_module("final_norm", ln(Cn));
  head_ = register_module("head", torch::nn::Linear(Cn, config_.classes));
  // Swin initialisation: N(0, 0.02) linear weights and bias tables, zero biases (LayerNorms 1/0).
  torch::NoGradGuard guard;
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* lin = m->as<torch::nn::Linear>()) {
      torch::nn::init::normal_(lin->weight, 0.0, 0.02);
      if (lin->bias.defined()) torch::nn::init::zeros_(lin->bias);
    }
  }
  for (auto& kv : named_parameters())
    if (kv.key().find("relative_position_bias_table") != std::string::npos)
      torch::nn::init::normal_(kv.value(), 0.0, 0.02);
}

torch::Tensor ARSwinImpl::sublayer(int s, int l, const torch::Tensor& h) {
  auto x = layer_norm_fp32(norms_[s][l], h);
  if (l % 2 == 1) return mlp_[s][l / 2]->forward(x);
  const int r = config_.stage_resolution(s), w = config_.stage_window(s);
  const int shift = (l / 2) % 2 == 1 ? config_.stage_shift(s) : 0;  // odd blocks shift
  const auto B = x.size(0), C = x.size(2);
  auto g = x.view({B, r, r, C});
  if (shift > 0) g = torch::roll(g, {-shift, -shift}, {1, 2});
  auto out = attn_[s][l / 2]->forward(window_partition(g, w), shift > 0 ? masks_[s] : torch::Tensor());
  g = window_reverse(out, w, r, r);
  if (shift > 0) g = torch::roll(g, {shift, shift}, {1, 2});
  return g.reshape({B, r * r, C});
}

torch::Tensor ARSwinImpl::forward(const torch::Tensor& images, RoutingCapture* capture,
                                  const RoutingAblation* ablation) {
  auto x = patch_embed_tokens(patch_embed_, images);  // (B, r0*r0, C0)
  x = layer_norm_fp32(patch_norm_, x);
  int point = 0;
  for (int s = 0; s < config_.stages(); ++s) {
    if (s > 0) x = merges_[s - 1]->forward(x, config_.stage_resolution(s - 1));
    const int L = 2 * config_.stage_depths[s];
    auto sub = [this, s](int l, const torch::Tensor& h) { return sublayer(s, l, h); };
    if (config_.residual == ResidualMode::Standard) {
      for (int l = 0; l < L; ++l) x = x + sub(l, x);
    } else {
      // The stage input is this stage's v_0; its sources and blocks start afresh.
      auto U = pseudo_query_[s] * key_gain_[s];
      x = attnres_stack(x, L, config_.effective_block_size(), U, config_.norm_eps, point, sub, capture, ablation);
      point += L + 1;
    }
  }
  return head_(layer_norm_fp32(final_norm_, x).mean(1));  // (B,K) from mean-pooled tokens (Swin has no CLS token)
}

}  // namespace arcal
