#include "model/ar_vit.hpp"

#include "core/check.hpp"
#include "core/env_switch.hpp"

namespace arcal {

namespace F = torch::nn::functional;

ARViTImpl::ARViTImpl(const ModelConfig& config) : config_(config) {
  validate_model_config(config_);
  if (config_.arch == "swin") {
    swin_ = register_module("swin", ARSwin(config_));
    return;
  }
  if (config_.arch == "lm") {
    lm_ = register_module("lm", ARLM(config_));
    return;
  }
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
  final_norm_ =
      register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(config_.norm_eps)));
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
  if (swin_ || lm_) throw_input("ARViT::embed", "the ViT presets only");
  auto x = patch_embed_tokens(patch_embed_, images);  // (B,T-1,d)
  auto cls = cls_token_.expand({x.size(0), 1, x.size(2)});
  return torch::cat({cls, x}, 1) + pos_embed_;  // (B,T,d)
}

torch::Tensor ARViTImpl::sublayer(int l, const torch::Tensor& h, bool first_token_only) {
  if (lm_ && !first_token_only) return lm_->sublayer(l, h);
  if (swin_ || lm_)
    throw_input("ARViT::sublayer",
                first_token_only ? "a first-token cut is for the ViT presets only" : "the ViT and LM presets only");
  if (first_token_only && l % 2 != 0)
    throw_input("ARViT::sublayer", "a first-token cut starts at an attention sublayer");
  torch::nn::LayerNorm norm{std::dynamic_pointer_cast<torch::nn::LayerNormImpl>(norms_[l])};
  auto normed = layer_norm_before_linear(norm, h);
  if (l % 2 == 0) return first_token_only ? attn_[l / 2]->forward_first_token(normed) : attn_[l / 2]->forward(normed);
  return mlp_[l / 2]->forward(normed);
}

torch::Tensor ARViTImpl::forward(const torch::Tensor& images, RoutingCapture* capture,
                                 const RoutingAblation* ablation) {
  if (swin_) return swin_->forward(images, capture, ablation);
  if (lm_) return lm_->forward(images, capture, ablation);
  const int L = config_.layers();
  auto v0 = embed(images);
  // The head reads the CLS token (token 0) only, so from the last attention sublayer's output on
  // no other token can reach the logits: in training that sublayer returns token 0 alone and the
  // last MLP, the routing points after it and the final norm run on one token of T (the same
  // function and gradients up to float rounding; tests/model/test_first_token.cpp). Evaluation and
  // captures run the whole stack, so a model's evaluated logits are bitwise those of its traces
  // (which record every token's routing).
  const int cut = is_training() && !capture && first_token_cut_enabled() ? L - 2 : -1;
  torch::Tensor stream;
  if (config_.residual == ResidualMode::Standard) {
    stream = v0;
    for (int l = 0; l < L; ++l)
      stream = l == cut ? stream.narrow(1, 0, 1) + sublayer(l, stream, true) : stream + sublayer(l, stream);
  } else {
    auto U = pseudo_query_ * key_gain_;  // (P,d): one effective query per routing point
    stream = attnres_stack(
        v0, L, config_.effective_block_size(), U, config_.norm_eps, 0,
        [this, cut](int l, const torch::Tensor& h) { return sublayer(l, h, l == cut); }, capture, ablation, cut);
  }
  auto cls = layer_norm_fp32(final_norm_, stream).select(1, 0);  // (B,d) at the CLS token
  return head_(cls);
}

void ARViTImpl::set_attention_backend(const AttentionBackend& backend) {
  if (swin_) throw_input("attention backend", "the ViT presets only; ar-swin-tiny's window attention has no hook");
  if (lm_) return lm_->set_attention_backend(backend);
  for (auto& a : attn_) a->set_attention_backend(backend);
}

namespace {
EnvSwitch g_first_token_cut("ARCAL_FIRST_TOKEN_CUT");
}  // namespace

bool first_token_cut_enabled() { return g_first_token_cut.enabled(); }

void set_first_token_cut(bool enabled) { g_first_token_cut.set(enabled); }

std::int64_t parameter_count(torch::nn::Module& module) {
  std::int64_t n = 0;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) n += p.numel();
  return n;
}

}  // namespace arcal
