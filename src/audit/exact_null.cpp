#include "audit/exact_null.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <optional>

#include "audit/matching.hpp"
#include "audit/refit_common.hpp"
#include "core/check.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "stats/bootstrap.hpp"
#include "stats/distributions.hpp"
#include "stats/kernels.hpp"
#include "stats/splits.hpp"

namespace arcal {

namespace {

using namespace refit_detail;

using Gains = std::vector<double>;  // one per applicable comparison

/// The comparisons of kProbeComparisons whose probe and control were fitted; with `needs_profile`
/// only those where at least one side reads the routing profile (a permutation of the profile cannot
/// change a comparison of two profile-free probes).
std::vector<ProbeComparisonSpec> applicable(const ProbeDesign& d, const std::vector<std::string>& names,
                                            bool needs_profile) {
  auto reads = [&](const std::string& name) {
    for (const auto& spec : d.mlps)
      if (spec.name == name) return reads_profile(d, spec);
    return false;  // linear
  };
  std::vector<ProbeComparisonSpec> out;
  for (const auto& c : kProbeComparisons) {
    if (std::find(names.begin(), names.end(), c.probe) == names.end() ||
        std::find(names.begin(), names.end(), c.control) == names.end())
      continue;
    if (needs_profile && !reads(c.probe) && !reads(c.control)) continue;
    out.push_back(c);
  }
  return out;
}

Gains gains_of(const std::vector<ProbeComparisonSpec>& comps, const std::vector<std::string>& names,
               const std::vector<double>& loss) {
  Gains out;
  for (const auto& c : comps) {
    const auto a = std::find(names.begin(), names.end(), c.probe), b = std::find(names.begin(), names.end(), c.control);
    out.push_back(loss[std::size_t(b - names.begin())] - loss[std::size_t(a - names.begin())]);
  }
  return out;
}

/// Fills a run's comparisons from the real gains and each comparison's null gains ([comparison][replicate];
/// with sequential stopping a comparison has the replicates drawn until it settled).
void finish_run(ExactNullRun& out, const std::vector<ProbeComparisonSpec>& comps, const Gains& real,
                const std::vector<std::vector<double>>& null, std::size_t h = 0) {
  for (std::size_t c = 0; c < comps.size(); ++c) {
    ExactNullComparison ec;
    ec.comparison = comps[c].name;
    ec.probe = comps[c].probe;
    ec.control = comps[c].control;
    ec.real_gain = real[c];
    ec.null_gain = null[c];
    double m = 0;
    for (double x : ec.null_gain) m += x;
    ec.null_mean = m / double(ec.null_gain.size());
    ec.null_q95 = quantile_of(ec.null_gain, 0.95);
    ec.p = sequential_p(ec.real_gain, ec.null_gain, h);
    out.comparisons.push_back(std::move(ec));
  }
}

/// Pooled over runs: replicate j's mean over runs is one draw of the null of the mean gain.
std::vector<ExactNullPooled> pool(const std::vector<ExactNullRun>& runs, const std::vector<std::string>& variants,
                                  std::size_t h = 0) {
  std::vector<ExactNullPooled> out;
  for (const auto& variant : variants) {
    std::vector<const ExactNullRun*> rs;
    for (const auto& r : runs)
      if (r.variant == variant) rs.push_back(&r);
    if (rs.empty()) continue;
    for (std::size_t c = 0; c < rs[0]->comparisons.size(); ++c) {
      ExactNullPooled p;
      p.variant = variant;
      p.comparison = rs[0]->comparisons[c].comparison;
      p.runs = rs.size();
      const std::size_t reps = rs[0]->comparisons[c].null_gain.size();
      std::vector<double> null(reps, 0.0);
      for (const auto* r : rs) {
        p.real_mean_gain += r->comparisons[c].real_gain / double(rs.size());
        for (std::size_t j = 0; j < reps; ++j) null[j] += r->comparisons[c].null_gain[j] / double(rs.size());
      }
      double m = 0;
      for (double x : null) m += x;
      p.null_mean = m / double(null.size());
      p.null_q95 = quantile_of(null, 0.95);
      p.p = sequential_p(p.real_mean_gain, null, h);
      p.replicates = reps;
      p.null_mean_gain = std::move(null);
      out.push_back(std::move(p));
    }
  }
  return out;
}

/// The matching space of a variant. "confidence": logit c (dims 1). "full_logit": what the outputs
/// say about routing, a balancing score: each profile column rescaled to [0, 1] and regressed on the
/// whole output (the full-logit probe's inputs: logit c, the predicted class and the class-ordered
/// log-probabilities) by the probe MLP (soft-label cross-entropy, whose minimiser is the conditional
/// mean; all columns in one stacked fit; cross-fitted, each half predicted by a fit on the other, so
/// an example's own routing does not enter its position), then the leading principal components of
/// those predictions (>= 90 % of their variance, at most 3), and logit ĝ(O) of the full-logit probe.
/// Groups are formed inside each predicted class (conditional_null_run). Matching on the raw sorted
/// output vector instead left routing so unevenly matched that 16 of 20 null runs rejected, and
/// sorted probabilities drop the predicted class (docs/audit_validation.md).
std::vector<double> matching_space(const AuditRunInput& run, const ProbeDesign& d, const std::string& variant,
                                   const MlpProbeOptions& mlp, std::uint64_t seed, int threads, std::size_t& dims) {
  const std::size_t n = run.confidence.size();
  if (variant == "confidence") {
    dims = 1;
    return d.columns[0];  // logit c
  }
  const auto it =
      std::find_if(d.mlps.begin(), d.mlps.end(), [](const ProbeDesign::Spec& sp) { return sp.name == "full_logit"; });
  if (it == d.mlps.end())
    throw_input("run_exact_null_audit",
                "variant \"full_logit\" needs the full_logit probe, which options.probes.only leaves out");
  std::vector<std::size_t> profile_cols;
  for (std::size_t c = 0; c < d.sources.size(); ++c)
    if (d.sources[c].profile >= 0 && d.sources[c].rows == 0) profile_cols.push_back(c);
  const std::size_t P = profile_cols.size();
  // The regressions read the sorted log-probabilities (the last sorted_width of the full-logit probe's columns):
  // compact and permutation-invariant, while the groups themselves are formed inside each predicted
  // class. Reading all 4K + 1 columns instead fitted the balancing score so much worse from ~1,000
  // examples that 12/12 misspecified-outputs null runs rejected (6/20 with the compact inputs).
  const std::vector<std::size_t> output_cols(it->cols.end() - long(d.sorted_width), it->cols.end());
  const std::size_t K = output_cols.size();
  std::vector<std::vector<double>> target(P, std::vector<double>(n));
  for (std::size_t j = 0; j < P; ++j) {
    const auto& col = d.columns[profile_cols[j]];
    const auto [lo, hi] = std::minmax_element(col.begin(), col.end());
    for (std::size_t i = 0; i < n; ++i) target[j][i] = *hi > *lo ? (col[i] - *lo) / (*hi - *lo) : 0.5;
  }
  std::vector<double> fitted(n * P);
  MlpProbeOptions mo = mlp;
  mo.soft_labels = true;
  mo.warm_start = nullptr;
  // Trained to convergence (patience 20, up to 400 epochs): the null is only as valid as this fit is
  // good (with the probe settings, patience 5, it stopped after ~14 epochs at corr 0.84 with the true
  // output feature and 14/20 misspecified null runs rejected; converged, 0.96).
  mo.patience = 20;
  mo.max_epochs = 400;
  mo.restarts = 1;
  std::vector<double> g(n, 0.5);
  // The two cross-fitted balancing regressions and the two cross-fitted fits of ĝ (below) are
  // independent jobs (each seeded on its own, writing disjoint rows) on the refits' workers; the
  // result does not depend on the thread count.
  parallel_for_index(4, threads, [&](std::size_t job) {
    if (job < 2) {
      const std::size_t h = job;
      const auto& fit_rows = h == 0 ? d.folds[0].evaluation : d.folds[0].calibration;
      const auto& pred_rows = h == 0 ? d.folds[0].calibration : d.folds[0].evaluation;
      std::vector<double> xf(fit_rows.size() * K), xp(pred_rows.size() * K);
      for (std::size_t i = 0; i < fit_rows.size(); ++i)
        for (std::size_t k = 0; k < K; ++k) xf[i * K + k] = d.columns[output_cols[k]][fit_rows[i]];
      for (std::size_t i = 0; i < pred_rows.size(); ++i)
        for (std::size_t k = 0; k < K; ++k) xp[i * K + k] = d.columns[output_cols[k]][pred_rows[i]];
      std::vector<std::vector<double>> yf(P);
      std::vector<const std::vector<double>*> yp(P);
      for (std::size_t j = 0; j < P; ++j) {
        yf[j] = pick(target[j], fit_rows);
        yp[j] = &yf[j];
      }
      MlpProbeOptions mh = mo;
      mh.seed = derive_seed(seed, h);
      const auto pred = fit_predict_mlp_probes(xf, fit_rows.size(), K, yp, xp, pred_rows.size(), mh);
      for (std::size_t j = 0; j < P; ++j)
        for (std::size_t i = 0; i < pred_rows.size(); ++i) fitted[pred_rows[i] * P + j] = pred[j][i];
      return;
    }
    const std::size_t f = job - 2;
    const auto& cal = d.folds[f].calibration;
    const auto& ev = d.folds[f].evaluation;
    const std::size_t m = output_cols.size();
    std::vector<double> xc(cal.size() * m), xe(ev.size() * m);
    for (std::size_t i = 0; i < cal.size(); ++i)
      for (std::size_t k = 0; k < m; ++k) xc[i * m + k] = d.columns[output_cols[k]][cal[i]];
    for (std::size_t i = 0; i < ev.size(); ++i)
      for (std::size_t k = 0; k < m; ++k) xe[i * m + k] = d.columns[output_cols[k]][ev[i]];
    MlpProbeOptions go = mlp;
    go.hidden1 = it->hidden1;
    go.hidden2 = it->hidden2;
    go.warm_start = nullptr;
    go.seed = derive_seed(seed, 200 + f);
    const auto pred = fit_predict_mlp_probe(xc, cal.size(), m, pick(run.correct, cal), xe, ev.size(), go);
    for (std::size_t i = 0; i < ev.size(); ++i) g[ev[i]] = std::min(std::max(pred[i], 1e-6), 1.0 - 1e-6);
  });
  std::size_t pcs = 0;
  const auto scores = principal_scores(fitted, P, 3, 0.9, pcs);
  // Second coordinate family: what the outputs say about correctness, logit ĝ(O) of the full-logit
  // probe (cross-fitted: each half predicted by the fit on the other). Within a group that agrees on
  // ĝ, routing differences cannot line up with differences in P(correct | O), so the permutation
  // stays close to valid where the routing regression above is off (and vice versa). Scaled to the
  // first component's spread so that both count.
  std::vector<double> lg(n);
  double mean_g = 0, mean_p = 0;
  for (std::size_t i = 0; i < n; ++i) {
    lg[i] = std::log(g[i] / (1.0 - g[i]));
    mean_g += lg[i] / double(n);
    mean_p += scores[i * pcs] / double(n);
  }
  double var_g = 0, var_p = 0;
  for (std::size_t i = 0; i < n; ++i) {
    var_g += (lg[i] - mean_g) * (lg[i] - mean_g);
    var_p += (scores[i * pcs] - mean_p) * (scores[i * pcs] - mean_p);
  }
  const double scale = var_g > 0 ? std::sqrt(var_p / var_g) : 0.0;
  dims = pcs + 1;
  std::vector<double> x(n * dims);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t c = 0; c < pcs; ++c) x[i * dims + c] = scores[i * pcs + c];
    x[i * dims + pcs] = (lg[i] - mean_g) * scale;
  }
  return x;
}

/// A run's null in progress, conditional or model-based: the comparisons, their real gains and, per
/// comparison, the null gains of the replicates drawn for it so far; the conditional null's matched
/// groups, or the model-based null's reference ĝ and warm start.
struct NullState {
  ExactNullRun out;
  std::uint64_t vseed = 0;
  std::vector<ProbeComparisonSpec> comps;
  Gains real;
  std::vector<std::vector<double>> null;         ///< [comparison][replicate]
  std::vector<std::vector<std::size_t>> groups;  ///< conditional
  Fold2 g;                                       ///< model-based: the reference on every example, per fold
  std::vector<std::array<MlpWeights, 2>> warm;   ///< model-based: the soft-reference warm start (or empty)
};

/// Matching space and groups of a run's conditional null (method.md §6.6 a); no fit yet.
NullState prepare_conditional(const AuditRunInput& run, const ProbeDesign& d, const std::string& variant, std::size_t v,
                              const ExactNullAuditOptions& o) {
  NullState st;
  st.vseed = derive_seed(derive_seed(d.run_seed, 0xC0D1), v);
  const std::uint64_t vseed = st.vseed;
  std::size_t dims = 1;
  const auto x = matching_space(run, d, variant, o.probes.mlp, derive_seed(vseed, 40), o.refit.threads, dims);
  ExactNullRun& out = st.out;
  out.run = run.run;
  out.variant = variant;
  // Groups inside each cross-fit half, so a permutation never moves a value between halves.
  auto& groups = st.groups;
  double dist = 0, scale = 0;
  // full_logit: also inside each predicted class, so a permutation never moves routing between classes
  // (the predicted class is part of the outputs; method.md §6.6). Distances are weighted by rows.
  const bool by_class = variant != "confidence";
  std::size_t matched_rows = 0;
  for (std::size_t h = 0; h < 2; ++h) {
    const auto& rows = h == 0 ? d.folds[0].calibration : d.folds[0].evaluation;
    // d.platt_class: the class itself, also in the reduced output form of a large vocabulary (a group
    // there would pool classes, and routing that tracks the class would move between them).
    std::vector<std::vector<std::size_t>> parts(by_class ? d.platt_classes : 1);
    for (auto i : rows) parts[by_class ? std::size_t(d.platt_class[i]) : 0].push_back(i);
    for (std::size_t c = 0; c < parts.size(); ++c) {
      if (parts[c].size() < 2) continue;  // a lone example of its class stays in place
      auto m = match_groups(x, dims, parts[c], o.audit.null_group_size, derive_seed(vseed, 50 + h + 2 * c));
      dist += m.mean_distance * double(parts[c].size());
      scale += m.random_pair_distance * double(parts[c].size());
      matched_rows += parts[c].size();
      for (auto& g : m.groups) groups.push_back(std::move(g));
    }
  }
  if (matched_rows > 0) {
    dist /= double(matched_rows);
    scale /= double(matched_rows);
  }
  out.matching = {variant == "confidence"
                      ? "logit c"
                      : "inside each predicted class: principal components (" + std::to_string(dims - 1) +
                            ") of the routing profile predicted from the whole output (class-ordered "
                            "log-probabilities), and logit P(correct) predicted from it",
                  o.audit.null_group_size, groups.size(), dist, scale};
  return st;
}

/// The probes the open comparisons read (probe, control and a correction's base), with the warm start
/// cut to match. A probe's refit does not depend on the other probes of the call (its own stacked fit
/// per fold, seeded per fold), so the open comparisons' gains are those of the whole design.
struct Restricted {
  ProbeDesign design;
  std::vector<std::array<MlpWeights, 2>> warm;
};

Restricted restrict_design(const ProbeDesign& d, const std::vector<std::array<MlpWeights, 2>>& warm,
                           const std::vector<ProbeComparisonSpec>& comps, const std::vector<bool>& open) {
  std::vector<std::string> keep;
  for (std::size_t c = 0; c < comps.size(); ++c)
    if (open[c]) {
      keep.push_back(comps[c].probe);
      keep.push_back(comps[c].control);
    }
  auto kept = [&](const std::string& name) { return std::find(keep.begin(), keep.end(), name) != keep.end(); };
  for (const auto& spec : d.mlps)
    if (kept(spec.name) && !spec.base.empty()) keep.push_back(spec.base);
  Restricted r{d, {}};
  r.design.mlps.clear();
  r.design.linear = d.linear && kept("linear");
  const std::size_t first_mlp = d.linear ? 1 : 0;
  if (!warm.empty() && r.design.linear) r.warm.push_back(warm[0]);
  for (std::size_t k = 0; k < d.mlps.size(); ++k)
    if (kept(d.mlps[k].name)) {
      r.design.mlps.push_back(d.mlps[k]);
      if (!warm.empty()) r.warm.push_back(warm[first_mlp + k]);
    }
  return r;
}

/// Fits replicates [first, first + count) of a run's null and appends each open comparison's null gains
/// (open empty: every comparison). With first = 0 the real labels are the last member of the same stack
/// (the same seeds, splits, batch order and start, so real and null fits are exchangeable under the
/// null) and set the comparisons and real gains. Conditional: replicate j permutes the profile within
/// the groups; model-based: its labels are Bern(ĝ) draws. Only the probes the open comparisons read are
/// refitted (restrict_design). A replicate's fit does not depend on the others in its stack beyond float
/// rounding, so drawing in batches gives the gains of one stack.
void extend_null(NullState& st, const AuditRunInput& run, const ProbeDesign& d, bool model_based, std::size_t first,
                 std::size_t count, const std::vector<bool>& open, const ExactNullAuditOptions& o) {
  const bool with_real = first == 0;
  const bool all_open = open.empty() || std::all_of(open.begin(), open.end(), [](bool b) { return b; });
  std::optional<Restricted> cut;
  if (!all_open) cut = restrict_design(d, st.warm, st.comps, open);
  const ProbeDesign& dd = cut ? cut->design : d;
  const auto& warm = cut ? cut->warm : st.warm;
  std::vector<std::vector<std::size_t>> perms(model_based ? 0 : count);
  std::vector<ReplicateSpec> specs(count + (with_real ? 1 : 0));
  std::vector<Fold2> labels(model_based ? count : 0);
  std::vector<std::array<const std::vector<double>*, 2>> ys;
  for (std::size_t j = 0; j < count; ++j) {
    if (model_based) {
      const std::uint64_t s = derive_seed(st.vseed, std::uint64_t(first + j));
      labels[j] = {bernoulli_draw(st.g[0], derive_seed(s, 0)), bernoulli_draw(st.g[1], derive_seed(s, 1))};
      ys.push_back({&labels[j][0], &labels[j][1]});
    } else {
      perms[j] = permute_within_groups(d.n, st.groups, derive_seed(st.vseed, std::uint64_t(first + j)));
      specs[j].profile_permutation = &perms[j];
      ys.push_back({&run.correct, &run.correct});
    }
  }
  if (with_real) ys.push_back({&run.correct, &run.correct});
  const auto fits = fit_probe_design_replicates(dd, ys, o.refit, {derive_seed(st.vseed, 10), derive_seed(st.vseed, 11)},
                                                warm.empty() ? nullptr : &warm, false, model_based ? nullptr : &specs);
  const auto& names = fits.front().names;
  if (with_real) {
    st.comps = applicable(d, names, !model_based);
    st.real = gains_of(st.comps, names, refit_losses(dd, fits.back(), {&run.correct, &run.correct}));
    st.null.assign(st.comps.size(), {});
  }
  std::vector<ProbeComparisonSpec> open_comps;
  std::vector<std::size_t> open_index;
  for (std::size_t c = 0; c < st.comps.size(); ++c)
    if (open.empty() || open[c]) {
      open_comps.push_back(st.comps[c]);
      open_index.push_back(c);
    }
  for (std::size_t j = 0; j < count; ++j) {
    const auto gains = gains_of(open_comps, names, refit_losses(dd, fits[j], ys[j]));
    for (std::size_t k = 0; k < open_index.size(); ++k) st.null[open_index[k]].push_back(gains[k]);
  }
}

/// Whether pooled comparison c has h null means (over the runs) at or above its real mean gain among
/// the replicates drawn for it: its decision at level alpha is then settled (method.md §6.7).
bool pooled_settled(const std::vector<NullState>& states, std::size_t c, std::size_t h) {
  double real = 0;
  for (const auto& st : states) real += st.real[c] / double(states.size());
  std::size_t ge = 0;
  for (std::size_t j = 0; j < states.front().null[c].size(); ++j) {
    double m = 0;
    for (const auto& st : states) m += st.null[c][j] / double(states.size());
    ge += m >= real - 1e-12;
  }
  return ge >= h;
}

/// Hosmer-Lemeshow on each fold's evaluation half: deciles of g, Σ (O − E)² / (E (1 − E / n_g)).
ReferenceFit reference_fit(const ProbeDesign& d, const Fold2& g, const std::vector<double>& correct) {
  ReferenceFit fit;
  for (std::size_t f = 0; f < 2; ++f) {
    const auto ge = pick(g[f], d.folds[f].evaluation), ye = pick(correct, d.folds[f].evaluation);
    const auto group = equal_mass_group_index(ge, 10);
    std::array<double, 10> nn{}, o{}, e{};
    for (std::size_t i = 0; i < ge.size(); ++i) {
      const auto k = std::size_t(group[i]);
      nn[k] += 1;
      o[k] += ye[i];
      e[k] += ge[i];
    }
    for (std::size_t k = 0; k < 10; ++k) {
      if (nn[k] == 0) continue;
      const double var = e[k] * (1.0 - e[k] / nn[k]);
      if (var > 0) fit.statistic += (o[k] - e[k]) * (o[k] - e[k]) / var;
      fit.df += 1;
    }
  }
  fit.p = fit.df > 0 ? chi_square_sf(fit.statistic, fit.df) : 1.0;
  return fit;
}

/// The reference ĝ of a run's model-based null (method.md §6.6 b), its held-out fit and the warm start;
/// no refit yet.
NullState prepare_model_based(const AuditRunInput& run, const ProbeDesign& d, const std::string& variant, std::size_t v,
                              const ExactNullAuditOptions& o) {
  const char* fn = "run_exact_null_audit";
  NullState st;
  Fold2& g = st.g;
  if (variant == "confidence") {
    for (std::size_t f = 0; f < 2; ++f)
      g[f] = nw_confidence_reference(run.confidence, run.correct, d.folds[f].calibration);
  } else {
    const auto it =
        std::find_if(d.mlps.begin(), d.mlps.end(), [](const ProbeDesign::Spec& s) { return s.name == "full_logit"; });
    if (it == d.mlps.end())
      throw_input(fn, "variant \"full_logit\" needs the full_logit probe, which options.probes.only leaves out");
    parallel_for_index(2, o.refit.threads, [&](std::size_t f) {  // each fold seeded on its own
      const auto& cal = d.folds[f].calibration;
      std::vector<double> xc(cal.size() * it->cols.size()), xa(d.n * it->cols.size());
      for (std::size_t i = 0; i < cal.size(); ++i)
        for (std::size_t k = 0; k < it->cols.size(); ++k) xc[i * it->cols.size() + k] = d.columns[it->cols[k]][cal[i]];
      for (std::size_t i = 0; i < d.n; ++i)
        for (std::size_t k = 0; k < it->cols.size(); ++k) xa[i * it->cols.size() + k] = d.columns[it->cols[k]][i];
      MlpProbeOptions mo = o.probes.mlp;
      mo.hidden1 = it->hidden1;
      mo.hidden2 = it->hidden2;
      mo.seed = derive_seed(d.run_seed, 1000 + f);  // the probe audit's own full-logit fit
      g[f] = fit_predict_mlp_probe(xc, cal.size(), it->cols.size(), pick(run.correct, cal), xa, d.n, mo);
      // The MLP's float32 sigmoid can reach 0 or 1; the null's truth stays strictly inside.
      for (auto& p : g[f]) p = std::min(std::max(p, 1e-6), 1.0 - 1e-6);
    });
  }
  if (!o.audit.refit_cold) st.warm = soft_warm_start(d, g, o.refit);
  st.vseed = derive_seed(derive_seed(d.run_seed, 0x0E11), v);
  st.out.run = run.run;
  st.out.variant = variant;
  st.out.reference_fit = reference_fit(d, g, run.correct);
  return st;
}

}  // namespace

ExactNullResult run_exact_null_audit(const std::vector<AuditRunInput>& runs, const ExactNullAuditOptions& o) {
  const char* fn = "run_exact_null_audit";
  check_runs(fn, runs, o.probes);
  const FullAuditOptions& a = o.audit;
  if (a.null_replicates < 1)
    throw_input(fn, "null_replicates is " + std::to_string(a.null_replicates) + ", but must be >= 1");
  if (a.null_group_size < 2 || a.null_group_size > 10)
    throw_input(fn, "null_group_size is " + std::to_string(a.null_group_size) + ", but must be in [2, 10]");
  if (a.null_variants.empty()) throw_input(fn, "null_variants is empty");
  for (std::size_t v = 0; v < a.null_variants.size(); ++v)
    if (a.null_variants[v] != "confidence" && a.null_variants[v] != "full_logit")
      throw_index(fn, "null_variants", v, "'" + a.null_variants[v] + "'", "\"confidence\" or \"full_logit\"");
  const auto t0 = std::chrono::steady_clock::now();
  ExactNullResult res;
  res.variants = a.null_variants;
  res.replicates = a.null_replicates;
  res.group_size = a.null_group_size;
  res.seed = o.probes.seed;
  res.refit = refit_settings(o.refit, false);
  res.has_model_based = a.null_model_based;
  const std::size_t total = runs.size() * a.null_variants.size() * (a.null_model_based ? 2 : 1);
  std::size_t done = 0;
  // Every run's design at once: the sequential null draws its replicates run by run in batches and
  // stops on the pooled comparisons (the runs' refits are subsampled, audit --refit-subsample).
  std::vector<ProbeDesign> designs;
  for (std::size_t r = 0; r < runs.size(); ++r) designs.push_back(make_probe_design(runs[r], r, o.probes));
  const std::size_t n_max = std::size_t(a.null_replicates);
  const std::size_t h = a.null_sequential ? settling_count(a.alpha, n_max) : 0;
  res.stop_after = h;
  std::vector<std::vector<ExactNullRun>> cond(runs.size()), model(runs.size());  // [run][variant]
  // One null of a variant over every run: batches of replicates per run until every pooled comparison
  // has settled (or all are drawn); a settled comparison's probes leave the later batches.
  auto draw = [&](bool model_based, std::size_t v, std::vector<std::vector<ExactNullRun>>& into) {
    std::vector<NullState> states;
    for (std::size_t r = 0; r < runs.size(); ++r)
      states.push_back(model_based ? prepare_model_based(runs[r], designs[r], a.null_variants[v], v, o)
                                   : prepare_conditional(runs[r], designs[r], a.null_variants[v], v, o));
    // Sequential: batches of h replicates per run, the fewest that can settle a comparison (h null
    // means at or above its real one); a comparison settles at the end of the batch holding its h-th.
    const std::size_t batch = a.null_sequential ? h : n_max;
    std::vector<bool> open;  // per comparison; empty until the first batch sets the comparisons
    for (std::size_t first = 0; first < n_max;) {
      const std::size_t count = std::min(batch, n_max - first);
      for (std::size_t r = 0; r < runs.size(); ++r)
        extend_null(states[r], runs[r], designs[r], model_based, first, count, open, o);
      first += count;
      if (open.empty()) open.assign(states.front().comps.size(), true);
      if (h == 0) continue;
      for (std::size_t c = 0; c < open.size(); ++c) open[c] = open[c] && !pooled_settled(states, c, h);
      if (std::none_of(open.begin(), open.end(), [](bool b) { return b; })) break;
    }
    for (std::size_t r = 0; r < runs.size(); ++r) {
      auto& st = states[r];
      finish_run(st.out, st.comps, st.real, st.null, h);
      into[r].push_back(std::move(st.out));
      if (o.progress) o.progress(++done, total);
    }
  };
  for (std::size_t v = 0; v < a.null_variants.size(); ++v) {
    draw(false, v, cond);
    if (a.null_model_based) draw(true, v, model);
  }
  for (std::size_t r = 0; r < runs.size(); ++r) {  // run-major, as results.json lists them
    for (auto& x : cond[r]) res.runs.push_back(std::move(x));
    for (auto& x : model[r]) res.model_runs.push_back(std::move(x));
  }
  res.pooled = pool(res.runs, a.null_variants, h);
  if (a.null_model_based) res.model_pooled = pool(res.model_runs, a.null_variants, h);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace arcal
