#include "model/intervene.hpp"

#include <algorithm>
#include <cmath>
#include <map>

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

std::vector<std::string> point_sublayers(const ModelConfig& config) {
  std::vector<std::string> out;
  if (config.residual == ResidualMode::Standard) return out;
  for (int L : config.stage_layers()) {
    for (int l = 0; l < L; ++l) out.push_back(l % 2 == 0 ? "attention" : "mlp");
    out.push_back("final");
  }
  return out;
}

namespace {

/// Per resampling unit (an image, or a language model's sequence): sums over its examples.
struct UnitSums {
  std::vector<double> correct, nll, kl;
  void resize(std::size_t n) {
    correct.assign(n, 0.0);
    nll.assign(n, 0.0);
    kl.assign(n, 0.0);
  }
};

/// One forward pass's per-example log-probabilities (E,K) double and targets (E), where E is the
/// batch's images or its B*T next-token predictions; unit_of (E) maps each to its unit.
struct BatchPass {
  torch::Tensor log_probs, targets;
};

void add_by_unit(const torch::Tensor& values, const std::vector<std::int64_t>& unit_of, std::vector<double>& sums) {
  const auto c = values.to(torch::kDouble).contiguous();
  const double* v = c.data_ptr<double>();
  for (std::size_t i = 0; i < unit_of.size(); ++i) sums[std::size_t(unit_of[i])] += v[i];
}

/// Bootstrap over units of the ratio sum(x) / sum(count): for count = 1 the mean over images; for
/// a language model the token mean with whole sequences resampled (a cluster bootstrap).
Interval ratio_ci(const std::vector<double>& x, const std::vector<double>& count, int draws, std::uint64_t seed,
                  double* estimate) {
  auto stat = [&](const std::vector<std::size_t>& idx) {
    double s = 0, c = 0;
    for (auto i : idx) {
      s += x[i];
      c += count[i];
    }
    return s / c;
  };
  auto r = percentile_bootstrap(x.size(), stat, draws, seed);
  *estimate = r.estimate;
  return r.ci;
}

struct Plan {
  int point;
  std::string sublayer;
  std::string family;
  RoutingAblation ablation;
};

}  // namespace

/// Masses closer than this are tied (float32 routing weights averaged in double).
constexpr double kMassTie = 1e-6;

std::vector<MassImportance> mass_importance(const InterventionReport& rep, const std::vector<std::string>& types) {
  std::vector<MassImportance> out;
  for (const std::string type : {"attention", "mlp", "all"}) {
    MassImportance m;
    m.sublayer = type;
    double best_mass = -1, best_kl = -1;
    for (const auto& e : rep.effects) {
      if (e.point != -1 || e.sublayer != type) continue;
      if (e.mass > best_mass) best_mass = e.mass, m.largest_mass_family = e.family;
      if (e.mean_kl > best_kl) best_kl = e.mean_kl, m.largest_effect_family = e.family;
      if (e.mass >= 0.1 && e.delta_nll_ci.low <= 0.0 && e.delta_nll_ci.high >= 0.0)
        m.mass_without_effect.push_back(e.family);
    }
    if (best_mass < 0) continue;  // no point of this type
    m.largest_mass = best_mass;
    m.largest_effect_kl = best_kl;
    // Dissociated: the largest-effect family is not among the largest-mass ones (ties in mass, as
    // under a uniform schedule, are not a dissociation).
    for (const auto& e : rep.effects)
      if (e.point == -1 && e.sublayer == type && e.family == m.largest_effect_family)
        m.dissociated = e.mass < best_mass - kMassTie;
    // Per point of this type: does the largest-mass family also have the largest KL?
    std::map<int, std::vector<const InterventionEffect*>> by_point;
    std::vector<double> masses, kls;
    for (const auto& e : rep.effects) {
      if (e.point < 0) continue;
      const auto& t = types[std::size_t(e.point)];
      if (type != "all" && t != type) continue;
      by_point[e.point].push_back(&e);
      masses.push_back(e.mass);
      kls.push_back(e.mean_kl);
    }
    for (const auto& [p, es] : by_point) {
      if (es.size() < 2) continue;  // one family: nothing to compare
      ++m.points;
      auto by_mass = *std::max_element(es.begin(), es.end(), [](auto* a, auto* b) { return a->mass < b->mass; });
      auto by_kl = *std::max_element(es.begin(), es.end(), [](auto* a, auto* b) { return a->mean_kl < b->mean_kl; });
      if (by_kl->mass < by_mass->mass - kMassTie) ++m.dissociated_points;
    }
    m.pairs = masses.size();
    m.spearman_mass_kl = masses.size() >= 2 ? spearman_correlation(masses, kls) : std::nan("");
    out.push_back(m);
  }
  return out;
}

InterventionReport run_interventions(ARViT& model, const TensorData& data, const InterventionOptions& o,
                                     const std::function<void(int, int)>& progress) {
  const auto& cfg = model->config();
  if (cfg.residual == ResidualMode::Standard)
    throw_input("run_interventions",
                "the model is a standard-residual network without routing; load it with --as-attnres");
  if (data.size() == 0) throw_input("run_interventions", "the data split is empty");
  if (data.text != (cfg.arch == "lm"))
    throw_input("run_interventions",
                data.text ? "a text split needs the language model" : "the language model needs a text split");
  const auto sources = cfg.sources_per_point();
  const auto types = point_sublayers(cfg);
  const int P = static_cast<int>(sources.size());
  std::vector<int> points = o.points;
  if (points.empty())
    for (int p = 0; p < P; ++p) points.push_back(p);
  for (int p : points)
    if (p < 0 || p >= P)
      throw_input("--points", "point " + std::to_string(p) + " is out of range [0, " + std::to_string(P - 1) + "]");
  for (const auto& f : o.families) family_sources(f, 2);  // validates names

  // The plan: every applicable (point, family); then each family at all its applicable points, and
  // at the points feeding attention, and feeding MLP sublayers.
  std::vector<Plan> plan;
  for (int p : points)
    for (const auto& f : o.families) {
      auto drop = family_sources(f, sources[p]);
      if (drop.empty()) continue;
      Plan pl{p, types[std::size_t(p)], f, {}};
      pl.ablation.drop_sources.assign(P, {});
      pl.ablation.drop_sources[p] = drop;
      plan.push_back(pl);
    }
  for (const std::string group : {"all", "attention", "mlp"})
    for (const auto& f : o.families) {
      Plan pl{-1, group, f, {}};
      pl.ablation.drop_sources.assign(P, {});
      bool any = false;
      for (int p : points) {
        if (group != "all" && types[std::size_t(p)] != group) continue;
        pl.ablation.drop_sources[p] = family_sources(f, sources[p]);
        any = any || !pl.ablation.drop_sources[p].empty();
      }
      // A group equal to "all" (every chosen point is of that type) would repeat that row.
      bool same_as_all = group != "all";
      for (int p : points) same_as_all = same_as_all && types[std::size_t(p)] == group;
      if (any && !same_as_all) plan.push_back(pl);
    }

  // Batches: images, or whole sequences of T next-token predictions.
  const std::int64_t N = data.size();
  const std::int64_t T = data.text ? data.images.size(1) - 1 : 1;
  if (data.text && T < 1) throw_input("run_interventions", "text sequences must hold at least 2 bytes");
  const std::int64_t batch =
      data.text ? std::max<std::int64_t>(1, o.batch_tokens / T) : std::max<std::int64_t>(1, o.batch_size);
  const std::int64_t batches = (N + batch - 1) / batch;
  const int total = static_cast<int>(batches * std::int64_t(plan.size() + 1));
  int done = 0;

  torch::NoGradGuard guard;
  model->eval();
  auto run_batch = [&](std::int64_t s, std::int64_t B, const RoutingAblation* ablation, RoutingCapture* cap) {
    BatchPass b;
    if (data.text) {
      auto seq = data.images.narrow(0, s, B).to(torch::kLong);
      auto logits = model->forward(seq.narrow(1, 0, T), cap, ablation);  // (B,T,K)
      b.log_probs = torch::log_softmax(logits.to(torch::kDouble), -1).reshape({B * T, -1});
      b.targets = seq.narrow(1, 1, T).reshape({B * T});
    } else {
      auto logits = model->forward(data.images.narrow(0, s, B), cap, ablation);
      b.log_probs = torch::log_softmax(logits.to(torch::kDouble), -1);
      b.targets = data.labels.narrow(0, s, B);
    }
    return b;
  };

  UnitSums base;
  base.resize(std::size_t(N));
  std::vector<UnitSums> abl(plan.size());
  for (auto& a : abl) a.resize(std::size_t(N));
  std::vector<torch::Tensor> alpha_mass(
      static_cast<std::size_t>(P));  // per point (S_p), summed over examples and tokens
  double mass_tokens = 0;
  std::vector<std::int64_t> unit_of;
  for (std::int64_t s = 0; s < N; s += batch) {
    const auto B = std::min<std::int64_t>(batch, N - s);
    unit_of.resize(std::size_t(B * T));
    for (std::int64_t i = 0; i < B * T; ++i) unit_of[std::size_t(i)] = s + i / T;
    RoutingCapture cap;
    const auto b0 = run_batch(s, B, nullptr, &cap);
    for (std::size_t p = 0; p < cap.alpha.size(); ++p) {
      auto m = cap.alpha[p].to(torch::kDouble).sum({1, 2});
      alpha_mass[p] = alpha_mass[p].defined() ? alpha_mass[p] + m : m;
    }
    mass_tokens += double(cap.alpha.empty() ? 0 : cap.alpha[0].size(1) * cap.alpha[0].size(2));
    const auto y = b0.targets.unsqueeze(1);
    const auto nll0 = -b0.log_probs.gather(1, y).squeeze(1);
    const auto pred0 = b0.log_probs.argmax(1);
    const auto correct0 = pred0.eq(b0.targets).to(torch::kDouble);
    const auto p0 = b0.log_probs.exp();
    add_by_unit(correct0, unit_of, base.correct);
    add_by_unit(nll0, unit_of, base.nll);
    if (progress) progress(++done, total);
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const auto b1 = run_batch(s, B, &plan[i].ablation, nullptr);
      add_by_unit(b1.log_probs.argmax(1).eq(b1.targets).to(torch::kDouble) - correct0, unit_of, abl[i].correct);
      add_by_unit(-b1.log_probs.gather(1, y).squeeze(1) - nll0, unit_of, abl[i].nll);
      add_by_unit((p0 * (b0.log_probs - b1.log_probs)).sum(1), unit_of, abl[i].kl);
      if (progress) progress(++done, total);
    }
  }
  for (auto& m : alpha_mass)
    if (m.defined()) m = m / mass_tokens;

  const std::vector<double> count(static_cast<std::size_t>(N), static_cast<double>(T));
  InterventionReport rep;
  rep.n = N * T;
  rep.unit = data.text ? "token" : "image";
  rep.clusters = N;
  double sum_c = 0, sum_n = 0;
  for (std::int64_t u = 0; u < N; ++u) sum_c += base.correct[std::size_t(u)], sum_n += base.nll[std::size_t(u)];
  rep.base_accuracy = sum_c / double(rep.n);
  rep.base_nll = sum_n / double(rep.n);
  std::vector<double> masses, kls, nlls;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const auto& pl = plan[i];
    InterventionEffect e;
    e.point = pl.point;
    e.sublayer = pl.sublayer;
    e.family = pl.family;
    e.n = rep.n;
    // Family mass: at one point, or averaged over the points where the family exists.
    double mass = 0;
    int counted = 0;
    for (int p = 0; p < P; ++p) {
      if (pl.ablation.drop_sources[p].empty()) continue;
      for (int s : pl.ablation.drop_sources[p]) mass += alpha_mass[std::size_t(p)][s].item<double>();
      ++counted;
    }
    e.mass = counted > 0 ? mass / counted : 0.0;
    const std::uint64_t seed = o.seed + 7919 * i;
    e.delta_accuracy_ci = ratio_ci(abl[i].correct, count, o.bootstrap, seed, &e.delta_accuracy);
    e.delta_nll_ci = ratio_ci(abl[i].nll, count, o.bootstrap, seed + 1, &e.delta_nll);
    e.mean_kl_ci = ratio_ci(abl[i].kl, count, o.bootstrap, seed + 2, &e.mean_kl);
    if (e.point >= 0) {
      masses.push_back(e.mass);
      kls.push_back(e.mean_kl);
      nlls.push_back(e.delta_nll);
    }
    rep.effects.push_back(e);
  }
  rep.pairs = masses.size();
  rep.spearman_mass_kl = masses.size() >= 2 ? spearman_correlation(masses, kls) : std::nan("");
  rep.spearman_mass_nll = masses.size() >= 2 ? spearman_correlation(masses, nlls) : std::nan("");
  rep.mass_importance = mass_importance(rep, types);
  return rep;
}

WrapperCheck check_wrapper(ARViT& standard, ARViT& wrapped, const TensorData& data, std::int64_t batch) {
  const auto& sc = standard->config();
  const auto& wc = wrapped->config();
  if (wc.residual == ResidualMode::Standard) throw_input("check_wrapper", "the wrapped model has no routing");
  if (sc.residual != ResidualMode::Standard)
    throw_input("check_wrapper", "the reference model is not standard-residual");
  if (sc.arch != wc.arch || sc.dim != wc.dim || sc.depth != wc.depth || sc.norm_eps != wc.norm_eps)
    throw_input("check_wrapper", "the two models are not the same network");
  if (data.size() == 0) throw_input("check_wrapper", "the data split is empty");
  torch::NoGradGuard guard;
  standard->eval();
  wrapped->eval();
  const auto B = std::min<std::int64_t>(std::max<std::int64_t>(1, batch), data.size());
  torch::Tensor x = data.images.narrow(0, 0, B);
  if (data.text) x = x.narrow(1, 0, x.size(1) - 1).to(torch::kLong);
  RoutingCapture cap;
  const auto a = standard->forward(x).to(torch::kDouble), b = wrapped->forward(x, &cap).to(torch::kDouble);
  WrapperCheck w;
  w.norm_eps = wc.norm_eps;
  w.max_rel_logit_diff = ((b - a).abs().max() / a.abs().max().clamp_min(1e-300)).item<double>();
  const auto S = wc.sources_per_point();
  for (std::size_t p = 0; p < cap.alpha.size(); ++p)
    w.max_routing_deviation = std::max(
        w.max_routing_deviation, (cap.alpha[p].to(torch::kDouble) - 1.0 / double(S[p])).abs().max().item<double>());
  w.examples = data.text ? B * x.size(1) : B;
  return w;
}

}  // namespace arcal
