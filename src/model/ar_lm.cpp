#include "model/ar_lm.hpp"

#include <string>

#include "core/check.hpp"

namespace arcal {

ARLMImpl::ARLMImpl(const ModelConfig& config) : config_(config) {
  validate_model_config(config_);
  if (config_.arch != "lm") throw_input("ARLM", "the model config's arch is '" + config_.arch + "', not lm");
  const int d = config_.dim, K = config_.classes;
  tok_embed_ = register_module("tok_embed", torch::nn::Embedding(K, d));
  if (config_.learned_positions) pos_embed_ = register_parameter("pos_embed", torch::zeros({config_.context, d}));
  norms_ = register_module("norms", torch::nn::ModuleList());
  for (int l = 0; l < config_.layers(); ++l)
    norms_->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(config_.norm_eps)));
  for (int b = 0; b < config_.depth; ++b) {
    attn_.push_back(register_module("attn" + std::to_string(b), MultiHeadAttention(d, config_.heads, /*causal=*/true)));
    mlp_.push_back(register_module("mlp" + std::to_string(b), Mlp(d, d * config_.mlp_ratio)));
  }
  final_norm_ =
      register_module("final_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(config_.norm_eps)));
  if (config_.tie_weights)
    head_bias_ = register_parameter("head_bias", torch::zeros({K}));
  else
    head_ = register_module("head", torch::nn::Linear(d, K));
  if (config_.residual != ResidualMode::Standard) {
    const int P = config_.routing_points();
    pseudo_query_ = register_parameter("pseudo_query", torch::zeros({P, d}));
    key_gain_ = register_parameter("key_gain", torch::ones({P, d}));
  }
  // GPT-2-style initialisation: normal(0, 0.02) embeddings and linear weights, zero biases.
  torch::NoGradGuard guard;
  torch::nn::init::normal_(tok_embed_->weight, 0.0, 0.02);
  if (pos_embed_.defined()) torch::nn::init::normal_(pos_embed_, 0.0, 0.02);
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* lin = m->as<torch::nn::Linear>()) {
      torch::nn::init::normal_(lin->weight, 0.0, 0.02);
      torch::nn::init::zeros_(lin->bias);
    }
  }
}

torch::Tensor ARLMImpl::sublayer(int l, const torch::Tensor& h) {
  torch::nn::LayerNorm norm{std::dynamic_pointer_cast<torch::nn::LayerNormImpl>(norms_[l])};
  auto normed = layer_norm_before_linear(norm, h);
  return (l % 2 == 0) ? attn_[l / 2]->forward(normed) : mlp_[l / 2]->forward(normed);
}

void ARLMImpl::set_attention_backend(const AttentionBackend& backend) {
  for (auto& a : attn_) a->set_attention_backend(backend);
}

torch::Tensor ARLMImpl::forward(const torch::Tensor& tokens, RoutingCapture* capture, const RoutingAblation* ablation) {
  const char* fn = "ARLM::forward";
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong) throw_input(fn, "tokens must be a (B,T) int64 tensor");
  const auto T = tokens.size(1);
  // Learned positions end at the training context; without positions (NoPE) any length runs.
  if (T < 1 || (config_.learned_positions && T > config_.context))
    throw_input(fn, "sequence length " + std::to_string(T) + " must be in [1, " + std::to_string(config_.context) +
                        "] (the model's context: its learned positions end there)");
  if (tokens.numel() > 0) {
    const auto lo = tokens.min().item<std::int64_t>(), hi = tokens.max().item<std::int64_t>();
    if (lo < 0 || hi >= config_.classes)
      throw_input(fn, "tokens must be in [0, " + std::to_string(config_.classes) + ") (got " + std::to_string(lo) +
                          ".." + std::to_string(hi) + ")");
  }
  auto v0 = tok_embed_(tokens);  // (B,T,d)
  if (pos_embed_.defined()) v0 = v0 + pos_embed_.slice(0, 0, T);
  const int L = config_.layers();
  torch::Tensor stream;
  if (config_.residual == ResidualMode::Standard) {
    stream = v0;
    for (int l = 0; l < L; ++l) stream = stream + sublayer(l, stream);
  } else {
    auto U = pseudo_query_ * key_gain_;
    stream = attnres_stack(
        v0, L, config_.effective_block_size(), U, config_.norm_eps, 0,
        [this](int l, const torch::Tensor& h) { return sublayer(l, h); }, capture, ablation);
  }
  auto h = layer_norm_fp32(final_norm_, stream);  // (B,T,d)
  if (config_.tie_weights) return torch::linear(h, tok_embed_->weight, head_bias_);
  return linear(head_, h);
}

}  // namespace arcal
