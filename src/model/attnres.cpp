#include "model/attnres.hpp"

#include <algorithm>

#include "core/check.hpp"
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
/// (undefined at a boundary). From sublayer `first_token_from` on (-1: never) only token 0 is
/// carried: that sublayer returns (B,1,d), to_first_token() narrows the completed sources, and the
/// partial sum is narrowed here.
template <class Complete, class Route, class ToFirstToken>
torch::Tensor run_blocks(const torch::Tensor& v0, int layers, int S,
                         const std::function<torch::Tensor(int, const torch::Tensor&)>& sublayer, Complete complete,
                         Route route, int first_token_from, ToFirstToken to_first_token) {
  complete(v0);
  torch::Tensor partial;
  for (int l = 0; l < layers; ++l) {
    if (l % S == 0 && partial.defined()) {
      complete(partial);
      partial = torch::Tensor();
    }
    auto out = sublayer(l, route(l, partial));
    if (l == first_token_from) {
      to_first_token();
      if (partial.defined()) partial = partial.narrow(1, 0, 1);
    }
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
  auto logits = torch::stack(scores, 0);                                          // (S,B,T)
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

torch::Tensor attnres_stack(const torch::Tensor& v0, int layers, int block_size, const torch::Tensor& U, double eps,
                            int first_point, const std::function<torch::Tensor(int, const torch::Tensor&)>& sublayer,
                            RoutingCapture* capture, const RoutingAblation* ablation, int first_token_from) {
  const int S = block_size;
  if (first_token_from >= layers) first_token_from = -1;
  if (first_token_from >= 0 && capture)
    throw_input("attnres_stack", "a routing capture records every token: no first-token cut with a capture");
  if (fused_operators_enabled() && v0.device().is_cpu()) {
    // Fused: every point one operator over the sources it reads (model/fused.hpp, RoutingBank), in
    // float (double stays double); bf16 sources (the linears' outputs under autocast) enter as they
    // are and are widened as the points read them, other reduced-precision ones once on entry. An
    // ablation (zero the listed sources' weights and renormalise) is the softmax over the kept
    // sources, so the point simply reads those; an ablation that drops nothing is no ablation.
    const auto compute = v0.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    const auto Uc = U.scalar_type() == compute ? U : U.to(compute);
    // After the first-token cut the later points read the sources' token-0 rows from a second bank.
    RoutingBank bank, first_token_bank;
    RoutingBank* current = &bank;
    auto add = [&](const torch::Tensor& v) {
      const auto t = v.scalar_type();
      return current->add(t == compute || (t == torch::kBFloat16 && compute == torch::kFloat) ? v : v.to(compute));
    };
    std::vector<int> done;              // slots of the completed sources
    std::vector<torch::Tensor> done_v;  // and the sources themselves
    auto complete = [&](const torch::Tensor& v) {
      done.push_back(add(v));
      done_v.push_back(v);
    };
    auto to_first_token = [&] {
      current = &first_token_bank;
      for (std::size_t i = 0; i < done.size(); ++i) {
        done_v[i] = done_v[i].narrow(1, 0, 1).contiguous();
        done[i] = add(done_v[i]);
      }
    };
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
        const auto T = done_v[0].size(1);  // 1 after the first-token cut
        h = torch::zeros({v0.size(0), T, v0.size(2)}, opts);
        alpha = torch::zeros({S_p, v0.size(0), T}, opts);
      } else {
        std::tie(h, alpha) = current->route(Uc[l], kept, eps);
        if (static_cast<int>(kept.size()) < S_p)  // the dropped sources' rows, weight 0, for the capture
          alpha = torch::zeros({S_p, alpha.size(1), alpha.size(2)}, opts)
                      .index_copy_(0, torch::tensor(kept_index, torch::kLong), alpha);
      }
      if (capture) capture->alpha.push_back(alpha.detach());
      return h;
    };
    return run_blocks(v0, layers, S, sublayer, complete, route, first_token_from, to_first_token);
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
  auto to_first_token = [&] {
    for (std::size_t i = 0; i < done_values.size(); ++i) {
      done_values[i] = done_values[i].narrow(1, 0, 1);
      done_scores[i] = done_scores[i].narrow(1, 0, 1);
    }
  };
  return run_blocks(v0, layers, S, sublayer, complete, route, first_token_from, to_first_token);
}

}  // namespace arcal
