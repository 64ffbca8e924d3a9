#include "model/trace_export.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace arcal {

namespace {

/// The token trace of a text split: one example per next-token prediction, sequence-major (row
/// s * T + t is position t of sequence s); labels the next byte, cluster = s (the sequence's index in
/// `data`), routing the token's own alpha at every point and its per-token statistics.
Trace export_token_trace(ARViT& model, const TensorData& data, const std::string& meta_json, int batch_size,
                         const std::function<void(std::int64_t, std::int64_t)>& progress,
                         const RoutingAblation* ablation) {
  const auto& cfg = model->config();
  const auto sources = cfg.sources_per_point();
  const std::int64_t seqs = data.size(), T = data.images.size(1) - 1, N = seqs * T;
  const std::int64_t P = static_cast<std::int64_t>(sources.size());
  const std::int64_t S = sources.empty() ? 0 : *std::max_element(sources.begin(), sources.end());
  const std::int64_t K = cfg.classes;
  Trace t;
  t.n = static_cast<std::size_t>(N);
  t.classes = static_cast<std::size_t>(K);
  t.points = static_cast<std::size_t>(P);
  t.sources = static_cast<std::size_t>(S);
  t.meta_json = meta_json;
  t.logits.resize(static_cast<std::size_t>(N * K));
  t.labels.resize(static_cast<std::size_t>(N));
  t.cluster.resize(static_cast<std::size_t>(N));
  if (P > 0) {
    t.routing.assign(static_cast<std::size_t>(N * P * S), 0.0f);
    t.routing_sources.assign(sources.begin(), sources.end());
    t.routing_entropy.resize(static_cast<std::size_t>(N * P));
    t.routing_depth_mean.resize(static_cast<std::size_t>(N * P));
    t.routing_depth_var.resize(static_cast<std::size_t>(N * P));
  }
  const auto device = model->parameters().front().device();
  const std::int64_t per_batch = std::max<std::int64_t>(1, batch_size / std::max<std::int64_t>(1, T / 8));
  for (std::int64_t s0 = 0; s0 < seqs; s0 += per_batch) {
    const auto B = std::min<std::int64_t>(per_batch, seqs - s0);
    const auto seq = data.images.narrow(0, s0, B);
    RoutingCapture cap;
    auto logits = model->forward(lm_inputs(seq).to(device), P > 0 ? &cap : nullptr, ablation)
                      .to(torch::kCPU, torch::kDouble)
                      .contiguous();  // (B,T,K)
    const std::int64_t row0 = s0 * T;
    std::copy(logits.data_ptr<double>(), logits.data_ptr<double>() + B * T * K, t.logits.begin() + row0 * K);
    auto y = lm_targets(seq).contiguous();
    std::copy(y.data_ptr<std::int64_t>(), y.data_ptr<std::int64_t>() + B * T, t.labels.begin() + row0);
    for (std::int64_t b = 0; b < B; ++b)
      std::fill(t.cluster.begin() + row0 + b * T, t.cluster.begin() + row0 + (b + 1) * T, s0 + b);
    for (std::int64_t p = 0; p < P; ++p) {
      auto alpha = cap.alpha[static_cast<std::size_t>(p)].to(torch::kCPU, torch::kDouble);  // (S_p,B,T)
      const auto Sp = alpha.size(0);
      auto ent = -(alpha * torch::where(alpha > 0, alpha.log(), torch::zeros_like(alpha))).sum(0);  // (B,T)
      auto depth = Sp > 1 ? torch::arange(Sp, torch::kDouble) / double(Sp - 1) : torch::zeros({1}, torch::kDouble);
      auto d = depth.view({Sp, 1, 1});
      auto mu = (alpha * d).sum(0);
      auto var = (alpha * (d - mu.unsqueeze(0)).pow(2)).sum(0);
      auto rows = alpha.permute({1, 2, 0}).reshape({B * T, Sp}).to(torch::kFloat).contiguous();
      ent = ent.reshape({-1}).contiguous();
      mu = mu.reshape({-1}).contiguous();
      var = var.reshape({-1}).contiguous();
      for (std::int64_t i = 0; i < B * T; ++i) {
        const std::size_t row = static_cast<std::size_t>(((row0 + i) * P + p) * S);
        std::copy(rows.data_ptr<float>() + i * Sp, rows.data_ptr<float>() + (i + 1) * Sp, t.routing.begin() + row);
        const std::size_t q = static_cast<std::size_t>((row0 + i) * P + p);
        t.routing_entropy[q] = static_cast<float>(ent.data_ptr<double>()[i]);
        t.routing_depth_mean[q] = static_cast<float>(mu.data_ptr<double>()[i]);
        t.routing_depth_var[q] = static_cast<float>(var.data_ptr<double>()[i]);
      }
    }
    if (progress) progress(s0 + B, seqs);
  }
  return t;
}

}  // namespace

TensorData select_sequences(const TensorData& data, std::int64_t count) {
  if (!data.text) throw InputError("select_sequences: the split is not a text split");
  if (count <= 0 || count >= data.size()) return data;
  std::vector<std::int64_t> idx(static_cast<std::size_t>(count));
  for (std::int64_t j = 0; j < count; ++j) idx[static_cast<std::size_t>(j)] = j * data.size() / count;
  auto index = torch::tensor(idx, torch::kLong);
  TensorData out = data;
  out.images = data.images.index_select(0, index).contiguous();
  out.labels = data.labels.index_select(0, index).contiguous();
  return out;
}

Trace export_trace(ARViT& model, const TensorData& data, const std::string& meta_json, int batch_size,
                   const std::function<void(std::int64_t, std::int64_t)>& progress, const RoutingAblation* ablation) {
  if (batch_size < 1) throw InputError("export_trace: batch size " + std::to_string(batch_size) + " must be >= 1");
  torch::NoGradGuard guard;
  if (data.text) {
    model->eval();
    return export_token_trace(model, data, meta_json, batch_size, progress, ablation);
  }
  model->eval();
  const auto& cfg = model->config();
  const auto sources = cfg.sources_per_point();
  const std::int64_t N = data.size();
  const std::int64_t P = static_cast<std::int64_t>(sources.size());
  const std::int64_t S = sources.empty() ? 0 : *std::max_element(sources.begin(), sources.end());
  const std::int64_t K = cfg.classes;

  Trace t;
  t.n = static_cast<std::size_t>(N);
  t.classes = static_cast<std::size_t>(K);
  t.points = static_cast<std::size_t>(P);
  t.sources = static_cast<std::size_t>(S);
  t.meta_json = meta_json;
  t.logits.resize(static_cast<std::size_t>(N * K));
  t.labels.assign(data.labels.data_ptr<std::int64_t>(), data.labels.data_ptr<std::int64_t>() + N);
  if (P > 0) {
    t.routing.assign(static_cast<std::size_t>(N * P * S), 0.0f);
    // Swin has no CLS token (it mean-pools): its traces carry no routing_cls.
    if (cfg.arch != "swin") t.routing_cls.assign(static_cast<std::size_t>(N * P * S), 0.0f);
    t.routing_sources.assign(sources.begin(), sources.end());
    t.routing_entropy.resize(static_cast<std::size_t>(N * P));
    t.routing_depth_mean.resize(static_cast<std::size_t>(N * P));
    t.routing_depth_var.resize(static_cast<std::size_t>(N * P));
  }
  const auto device = model->parameters().front().device();
  for (std::int64_t s0 = 0; s0 < N; s0 += batch_size) {
    const auto B = std::min<std::int64_t>(batch_size, N - s0);
    RoutingCapture cap;
    auto logits = model->forward(data.images.narrow(0, s0, B).to(device), P > 0 ? &cap : nullptr, ablation)
                      .to(torch::kCPU, torch::kDouble)
                      .contiguous();
    std::copy(logits.data_ptr<double>(), logits.data_ptr<double>() + B * K, t.logits.begin() + s0 * K);
    for (std::int64_t p = 0; p < P; ++p) {
      auto alpha = cap.alpha[static_cast<std::size_t>(p)].to(torch::kCPU, torch::kFloat);  // (S_p,B,T)
      const auto Sp = alpha.size(0);
      auto mean = alpha.mean(2).t().contiguous();      // (B,S_p) token mean
      auto cls = alpha.select(2, 0).t().contiguous();  // (B,S_p) at CLS
      // Per-token statistics, then averaged over tokens (method.md §3).
      auto a64 = alpha.to(torch::kDouble);
      auto ent = -(a64 * torch::where(a64 > 0, a64.log(), torch::zeros_like(a64))).sum(0).mean(1);  // (B)
      auto depth = Sp > 1 ? torch::arange(Sp, torch::kDouble) / double(Sp - 1) : torch::zeros({1}, torch::kDouble);
      auto d = depth.view({Sp, 1, 1});
      auto mu_tok = (a64 * d).sum(0);                                  // (B,T)
      auto var_tok = (a64 * (d - mu_tok.unsqueeze(0)).pow(2)).sum(0);  // (B,T)
      auto mu = mu_tok.mean(1).contiguous(), var = var_tok.mean(1).contiguous();
      ent = ent.contiguous();
      const double* ent_p = ent.data_ptr<double>();
      const double* mu_p = mu.data_ptr<double>();
      const double* var_p = var.data_ptr<double>();
      for (std::int64_t b = 0; b < B; ++b) {
        const std::size_t row = static_cast<std::size_t>(((s0 + b) * P + p) * S);
        std::copy(mean.data_ptr<float>() + b * Sp, mean.data_ptr<float>() + (b + 1) * Sp, t.routing.begin() + row);
        if (!t.routing_cls.empty())
          std::copy(cls.data_ptr<float>() + b * Sp, cls.data_ptr<float>() + (b + 1) * Sp, t.routing_cls.begin() + row);
        const std::size_t q = static_cast<std::size_t>((s0 + b) * P + p);
        t.routing_entropy[q] = static_cast<float>(ent_p[b]);
        t.routing_depth_mean[q] = static_cast<float>(mu_p[b]);
        t.routing_depth_var[q] = static_cast<float>(var_p[b]);
      }
    }
    if (progress) progress(s0 + B, N);
  }
  return t;
}

}  // namespace arcal
