#include "model/intervene.hpp"

#include <cmath>

#include "core/check.hpp"
#include "stats/correlation.hpp"

namespace arcal {

std::vector<int> family_sources(const std::string& family, int sources) {
  std::vector<int> out;
  if (family == "embedding") {
    if (sources >= 2) out.push_back(0);  // with one source, dropping it leaves nothing to renormalise
  } else if (family == "current") {
    if (sources >= 2) out.push_back(sources - 1);
  } else if (family == "history") {
    for (int i = 1; i + 1 < sources; ++i) out.push_back(i);
  } else {
    throw_input("--families", "'" + family + "' is not a source family; expected embedding, current or history");
  }
  return out;
}

namespace {

struct PassResult {
  torch::Tensor log_probs;  // (N,K) double
  std::vector<torch::Tensor> alpha_mass;  // per point (S_p) mean over examples and tokens
};

PassResult forward_all(ARViT& model, const TensorData& data, int batch, const RoutingAblation* ablation, bool capture) {
  torch::NoGradGuard guard;
  model->eval();
  std::vector<torch::Tensor> parts;
  PassResult r;
  const auto N = data.size();
  for (std::int64_t s = 0; s < N; s += batch) {
    const auto B = std::min<std::int64_t>(batch, N - s);
    RoutingCapture cap;
    auto logits = model->forward(data.images.narrow(0, s, B), capture ? &cap : nullptr, ablation);
    parts.push_back(torch::log_softmax(logits.to(torch::kDouble), -1));
    if (capture) {
      if (r.alpha_mass.empty()) r.alpha_mass.resize(cap.alpha.size());
      for (std::size_t p = 0; p < cap.alpha.size(); ++p) {
        auto m = cap.alpha[p].to(torch::kDouble).sum({1, 2});  // (S_p) summed over batch and tokens
        r.alpha_mass[p] = r.alpha_mass[p].defined() ? r.alpha_mass[p] + m : m;
      }
    }
  }
  r.log_probs = torch::cat(parts, 0);
  if (capture) {
    const double tokens = double(model->config().tokens());
    for (auto& m : r.alpha_mass) m = m / (double(N) * tokens);
  }
  return r;
}

std::vector<double> to_vector(const torch::Tensor& t) {
  auto c = t.to(torch::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

Interval mean_ci(const std::vector<double>& x, int draws, std::uint64_t seed, double* mean_out) {
  auto stat = [&](const std::vector<std::size_t>& idx) {
    double s = 0;
    for (auto i : idx) s += x[i];
    return s / double(idx.size());
  };
  auto r = percentile_bootstrap(x.size(), stat, draws, seed);
  *mean_out = r.estimate;
  return r.ci;
}

}  // namespace

InterventionReport run_interventions(ARViT& model, const TensorData& data, const InterventionOptions& o,
                                     const std::function<void(int, int)>& progress) {
  const auto& cfg = model->config();
  if (cfg.residual == ResidualMode::Standard)
    throw_input("run_interventions", "the model is a standard-residual network without routing; load it with --as-attnres");
  if (data.size() == 0) throw_input("run_interventions", "the data split is empty");
  const auto sources = cfg.sources_per_point();
  const int P = static_cast<int>(sources.size());
  std::vector<int> points = o.points;
  if (points.empty())
    for (int p = 0; p < P; ++p) points.push_back(p);
  for (int p : points)
    if (p < 0 || p >= P)
      throw_input("--points", "point " + std::to_string(p) + " is out of range [0, " + std::to_string(P - 1) + "]");
  for (const auto& f : o.families) family_sources(f, 2);  // validates names

  // The plan: every applicable (point, family), then each family at all its applicable points.
  struct Plan {
    int point;
    std::string family;
    RoutingAblation ablation;
  };
  std::vector<Plan> plan;
  for (int p : points)
    for (const auto& f : o.families) {
      auto drop = family_sources(f, sources[p]);
      if (drop.empty()) continue;
      Plan pl{p, f, {}};
      pl.ablation.drop_sources.assign(P, {});
      pl.ablation.drop_sources[p] = drop;
      plan.push_back(pl);
    }
  for (const auto& f : o.families) {
    Plan pl{-1, f, {}};
    pl.ablation.drop_sources.assign(P, {});
    bool any = false;
    for (int p : points) {
      pl.ablation.drop_sources[p] = family_sources(f, sources[p]);
      any = any || !pl.ablation.drop_sources[p].empty();
    }
    if (any) plan.push_back(pl);
  }

  const int total = static_cast<int>(plan.size()) + 1;
  auto base = forward_all(model, data, o.batch_size, nullptr, true);
  if (progress) progress(1, total);
  auto labels = data.labels.unsqueeze(1);
  auto base_nll = -base.log_probs.gather(1, labels).squeeze(1);
  auto base_correct = base.log_probs.argmax(1).eq(data.labels).to(torch::kDouble);
  auto base_p = base.log_probs.exp();

  InterventionReport rep;
  rep.n = data.size();
  rep.base_accuracy = base_correct.mean().item<double>();
  rep.base_nll = base_nll.mean().item<double>();
  std::vector<double> masses, kls, nlls;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auto& pl = plan[i];
    auto abl = forward_all(model, data, o.batch_size, &pl.ablation, false);
    InterventionEffect e;
    e.point = pl.point;
    e.family = pl.family;
    e.n = rep.n;
    // Family mass: at one point, or averaged over the points where the family exists.
    double mass = 0;
    int counted = 0;
    for (int p = 0; p < P; ++p) {
      if (pl.ablation.drop_sources[p].empty()) continue;
      for (int s : pl.ablation.drop_sources[p]) mass += base.alpha_mass[p][s].item<double>();
      ++counted;
    }
    e.mass = counted > 0 ? mass / counted : 0.0;
    auto correct = abl.log_probs.argmax(1).eq(data.labels).to(torch::kDouble);
    auto nll = -abl.log_probs.gather(1, labels).squeeze(1);
    auto kl = (base_p * (base.log_probs - abl.log_probs)).sum(1);
    const std::uint64_t seed = o.seed + 7919 * i;
    e.delta_accuracy_ci = mean_ci(to_vector(correct - base_correct), o.bootstrap, seed, &e.delta_accuracy);
    e.delta_nll_ci = mean_ci(to_vector(nll - base_nll), o.bootstrap, seed + 1, &e.delta_nll);
    e.mean_kl_ci = mean_ci(to_vector(kl), o.bootstrap, seed + 2, &e.mean_kl);
    if (e.point >= 0) {
      masses.push_back(e.mass);
      kls.push_back(e.mean_kl);
      nlls.push_back(e.delta_nll);
    }
    rep.effects.push_back(e);
    if (progress) progress(static_cast<int>(i) + 2, total);
  }
  rep.pairs = masses.size();
  rep.spearman_mass_kl = masses.size() >= 2 ? spearman_correlation(masses, kls) : std::nan("");
  rep.spearman_mass_nll = masses.size() >= 2 ? spearman_correlation(masses, nlls) : std::nan("");
  return rep;
}

}  // namespace arcal
