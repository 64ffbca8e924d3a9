#include "model/attnres.hpp"

#include <algorithm>

#include "model/fused.hpp"

namespace arcal {

namespace {

/// Which of point `point`'s S sources the ablation drops (indices outside [0, S), and points past
/// the ablation's list, drop nothing).
std::vector<bool> dropped_sources(const RoutingAblation* ablation, int point, int S) {
  std::vector<bool> drop(static_cast<std::size_t>(S), false);
  if (ablation && point >= 0 && point < static_cast<int>(ablation->drop_sources.size()))
    for (int s : ablation->drop_sources[static_cast<std::size_t>(point)])
      if (s >= 0 && s < S) drop[static_cast<std::size_t>(s)] = true;
  return drop;
}

/// The block structure both routing paths share: sources complete at block boundaries (every S
/// sublayers), the partial block sum b_n^partial accumulates in between. complete(v) registers a
/// completed source; route(l, partial) runs point l over the completed sources and the partial sum
/// (undefined at a boundary).
template <class Complete, class Route>
torch::Tensor run_blocks(const torch::Tensor& v0, int layers, int S,
                         const std::function<torch::Tensor(int, const torch::Tensor&)>& sublayer, Complete complete,
                         Route route) {
  complete(v0);
  torch::Tensor partial;
  for (int l = 0; l < layers; ++l) {
    if (l % S == 0 && partial.defined()) {
      complete(partial);
      partial = torch::Tensor();
    }
    auto out = sublayer(l, route(l, partial));
    partial = partial.defined() ? partial + out : out;
  }
  return route(layers, partial);
}

}  // namespace

torch::Tensor rms_normalise(const torch::Tensor& v, double eps) {
  return v * torch::rsqrt(v.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

torch::Tensor attnres_route(int point, const std::vector<torch::Tensor>& scores,
                            const std::vector<torch::Tensor>& values, RoutingCapture* capture,
                            const RoutingAblation* ablation) {
  auto logits = torch::stack(scores, 0);  // (S,B,T)
  if (logits.scalar_type() != torch::kDouble) logits = logits.to(torch::kFloat);  // at least fp32
  auto alpha = torch::softmax(logits, 0);
  const auto drop = dropped_sources(ablation, point, static_cast<int>(logits.size(0)));
  if (std::find(drop.begin(), drop.end(), true) != drop.end()) {
    auto keep = torch::ones({logits.size(0), 1, 1}, alpha.options());
    for (std::size_t s = 0; s < drop.size(); ++s)
      if (drop[s]) keep[static_cast<std::int64_t>(s)] = 0.0;
    alpha = alpha * keep;
    alpha = alpha / alpha.sum(0, true).clamp_min(1e-30);
  }
  if (capture) capture->alpha.push_back(alpha.detach());
  auto V = torch::stack(values, 0);                             // (S,B,T,d)
  return (alpha.to(V.scalar_type()).unsqueeze(-1) * V).sum(0);  // (B,T,d)
}

torch::Tensor attnres_stack(const torch::Tensor& v0, int layers, int block_size, const torch::Tensor& U,
                            double eps, int first_point,
                            const std::function<torch::Tensor(int, const torch::Tensor&)>& sublayer,
                            RoutingCapture* capture, const RoutingAblation* ablation) {
  const int S = block_size;
  if (fused_operators_enabled() && v0.device().is_cpu()) {
    // Fused: every point one operator over the sources it reads (model/fused.hpp, RoutingBank), in
    // float (double stays double); reduced-precision sources are widened once, when they enter. An
    // ablation (zero the listed sources' weights and renormalise) is the softmax over the kept
    // sources, so the point simply reads those; an ablation that drops nothing is no ablation.
    const auto compute = v0.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    const auto Uc = U.scalar_type() == compute ? U : U.to(compute);
    RoutingBank bank;
    auto add = [&](const torch::Tensor& v) { return bank.add(v.scalar_type() == compute ? v : v.to(compute)); };
    std::vector<int> done;  // slots of the completed sources
    auto complete = [&](const torch::Tensor& v) { done.push_back(add(v)); };
    auto route = [&](int l, const torch::Tensor& partial) {
      std::vector<int> slots = done;
      if (partial.defined()) slots.push_back(add(partial));
      const int S_p = static_cast<int>(slots.size());
      const auto drop = dropped_sources(ablation, first_point + l, S_p);
      std::vector<int> kept;
      std::vector<std::int64_t> kept_index;
      for (int s = 0; s < S_p; ++s)
        if (!drop[static_cast<std::size_t>(s)]) {
          kept.push_back(slots[static_cast<std::size_t>(s)]);
          kept_index.push_back(s);
        }
      const auto opts = v0.options().dtype(compute);
      torch::Tensor h, alpha;
      if (kept.empty()) {  // every source dropped: no weight anywhere, as the composite's 0 / max(0, 1e-30)
        h = torch::zeros({v0.size(0), v0.size(1), v0.size(2)}, opts);
        alpha = torch::zeros({S_p, v0.size(0), v0.size(1)}, opts);
      } else {
        std::tie(h, alpha) = bank.route(Uc[l], kept, eps);
        if (static_cast<int>(kept.size()) < S_p)  // the dropped sources' rows, weight 0, for the capture
          alpha = torch::zeros({S_p, v0.size(0), v0.size(1)}, opts)
                      .index_copy_(0, torch::tensor(kept_index, torch::kLong), alpha);
      }
      if (capture) capture->alpha.push_back(alpha.detach());
      return h;
    };
    return run_blocks(v0, layers, S, sublayer, complete, route);
  }
  // Completed sources b_0..b_{n-1}: their values and their scores against every point, computed
  // once when the source completes (the key is RMS-normalised once, not at every point).
  std::vector<torch::Tensor> done_values, done_scores;  // (B,T,d), (B,T,P)
  auto complete = [&](const torch::Tensor& v) {
    done_values.push_back(v);
    done_scores.push_back(torch::matmul(rms_normalise(v, eps), U.t()));
  };
  auto route = [&](int l, const torch::Tensor& partial) {
    std::vector<torch::Tensor> scores, values;
    for (std::size_t i = 0; i < done_values.size(); ++i) {
      scores.push_back(done_scores[i].select(-1, l));
      values.push_back(done_values[i]);
    }
    if (partial.defined()) {
      scores.push_back(torch::matmul(rms_normalise(partial, eps), U[l]));
      values.push_back(partial);
    }
    return attnres_route(first_point + l, scores, values, capture, ablation);
  };
  return run_blocks(v0, layers, S, sublayer, complete, route);
}

}  // namespace arcal
