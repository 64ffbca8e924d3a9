#include "model/attnres.hpp"

#include "model/fused.hpp"

namespace arcal {

torch::Tensor rms_normalise(const torch::Tensor& v, double eps) {
  return v * torch::rsqrt(v.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

torch::Tensor attnres_route(int point, const std::vector<torch::Tensor>& scores,
                            const std::vector<torch::Tensor>& values, RoutingCapture* capture,
                            const RoutingAblation* ablation) {
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
  if (fused_operators_enabled() && alpha.device().is_cpu()) {
    // The weighted sum in alpha's precision (fp32 at least), returned in the dtype the stacked
    // composite below would give (the sources' promoted type).
    auto result = values[0].scalar_type();
    for (const auto& v : values) result = torch::promote_types(result, v.scalar_type());
    const auto compute = result == torch::kDouble ? torch::kDouble : alpha.scalar_type();
    std::vector<torch::Tensor> v;
    v.reserve(values.size());
    for (const auto& t : values) v.push_back(t.scalar_type() == compute ? t : t.to(compute));
    auto h = routing_sum(alpha.to(compute), v);
    return h.scalar_type() == result ? h : h.to(result);
  }
  auto V = torch::stack(values, 0);                             // (S,B,T,d)
  return (alpha.to(V.scalar_type()).unsqueeze(-1) * V).sum(0);  // (B,T,d)
}

torch::Tensor attnres_stack(const torch::Tensor& v0, int layers, int block_size, const torch::Tensor& U,
                            double eps, int first_point,
                            const std::function<torch::Tensor(int, const torch::Tensor&)>& sublayer,
                            RoutingCapture* capture, const RoutingAblation* ablation) {
  const int S = block_size;
  if (fused_operators_enabled() && v0.device().is_cpu() && (!ablation || ablation->empty())) {
    // Fused: every point one operator over the sources it reads (model/fused.hpp, RoutingBank), in
    // float (double stays double); reduced-precision sources are widened once, when they enter.
    const auto compute = v0.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    const auto Uc = U.scalar_type() == compute ? U : U.to(compute);
    RoutingBank bank;
    auto add = [&](const torch::Tensor& v) { return bank.add(v.scalar_type() == compute ? v : v.to(compute)); };
    std::vector<int> done{add(v0)};  // slots of the completed sources
    torch::Tensor partial;
    auto route = [&](int l) {
      std::vector<int> slots = done;
      if (partial.defined()) slots.push_back(add(partial));
      auto [h, alpha] = bank.route(Uc[l], slots, eps);
      if (capture) capture->alpha.push_back(alpha.detach());
      return h;
    };
    for (int l = 0; l < layers; ++l) {
      if (l % S == 0 && partial.defined()) {
        done.push_back(add(partial));
        partial = torch::Tensor();
      }
      auto out = sublayer(l, route(l));
      partial = partial.defined() ? partial + out : out;
    }
    return route(layers);
  }
  // Completed sources b_0..b_{n-1}: their values and their scores against every point, computed
  // once when the source completes (the key is RMS-normalised once, not at every point).
  std::vector<torch::Tensor> done_values, done_scores;  // (B,T,d), (B,T,P)
  // With the fused routing sum a reduced-precision source is widened once here, not at every point.
  const bool widen = fused_operators_enabled() && v0.device().is_cpu();
  auto complete = [&](const torch::Tensor& v) {
    const auto t = v.scalar_type();
    done_values.push_back(widen && (t == torch::kBFloat16 || t == torch::kHalf) ? v.to(torch::kFloat) : v);
    done_scores.push_back(torch::matmul(rms_normalise(v, eps), U.t()));
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
      scores.push_back(torch::matmul(rms_normalise(partial, eps), U[point]));
      values.push_back(partial);
    }
  };
  for (int l = 0; l < layers; ++l) {
    if (l % S == 0 && partial.defined()) {
      complete(partial);
      partial = torch::Tensor();
    }
    gather(l);
    auto h = attnres_route(first_point + l, scores, values, capture, ablation);
    auto out = sublayer(l, h);
    partial = partial.defined() ? partial + out : out;
  }
  gather(layers);
  return attnres_route(first_point + layers, scores, values, capture, ablation);
}

}  // namespace arcal
