#include "audit/probes.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <numeric>
#include <thread>

#include "calib/calibrators.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "stats/splits.hpp"

namespace arcal {

MlpProbeOptions ProbeAuditOptions::default_probe_mlp_options() {
  MlpProbeOptions o;
  o.restarts = 1;
  o.lr = 3e-3;
  o.batch_size = 512;
  o.max_epochs = 100;
  o.patience = 5;
  return o;
}

namespace {

constexpr std::size_t kStackReplicates = 64;  // replicates per stacked fit
/// Bytes of float32 training rows a stack with rows of its own may hold (its replicates' rows are
/// stacked): at N = 10^6 the 41-column full-logit probe's 5 cross-fits are 2 stacks, not one of 410 MB.
constexpr std::size_t kStackRowBytes = std::size_t(1) << 28;

/// Replicates per stacked fit of n training rows and f columns: kStackReplicates, or fewer when each
/// replicate has rows of its own and their float32 copies would exceed kStackRowBytes (at least 1).
std::size_t stack_size(bool rows_shared, std::size_t n, std::size_t f) {
  if (rows_shared) return kStackReplicates;
  return std::clamp<std::size_t>(kStackRowBytes / std::max<std::size_t>(1, n * f * sizeof(float)), 1, kStackReplicates);
}

using Columns = std::vector<const std::vector<double>*>;  // feature columns, each [n]

std::vector<double> pick(const std::vector<double>& v, const std::vector<std::size_t>& idx) {
  std::vector<double> out(idx.size());
  for (std::size_t r = 0; r < idx.size(); ++r) out[r] = v[idx[r]];
  return out;
}

/// Column j of a row-major [n, d] matrix.
std::vector<double> column(const std::vector<double>& m, std::size_t n, std::size_t d, std::size_t j) {
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = m[i * d + j];
  return out;
}

void validate_run(const AuditRunInput& run, std::size_t r, const ProbeAuditOptions& o) {
  const char* fn = "run_probes";
  const std::string where = "run[" + std::to_string(r) + "] '" + run.run + "': ";
  const std::size_t n = run.confidence.size();
  if (run.correct.size() != n || run.labels.size() != n || run.predictive_entropy.size() != n)
    throw_input(fn, where + "confidence, correct, predictive_entropy and labels must all have " + std::to_string(n) +
                        " elements");
  if (n < 40) throw_input(fn, where + "has " + std::to_string(n) + " examples; the probes need at least 40");
  const std::size_t p = run.profile_names.size();
  if (p == 0) throw_input(fn, where + "profile_names is empty; the probes need at least one profile column");
  if (run.profile.size() != n * p)
    throw_input(fn, where + "profile has " + std::to_string(run.profile.size()) +
                        " values, but must have n x P = " + std::to_string(n * p));
  if (run.classes < 2) throw_input(fn, where + "classes is " + std::to_string(run.classes) + ", but must be >= 2");
  if (run.log_probs.empty()) {  // the reduced form: the sorted head of each row and the rest's mass
    if (run.sorted_width < 2 || run.sorted_log_probs.size() != n * run.sorted_width)
      throw_input(fn, where + "sorted_log_probs has " + std::to_string(run.sorted_log_probs.size()) +
                          " values, but must have n x sorted_width = " + std::to_string(n * run.sorted_width) +
                          " (sorted_width >= 2)");
    for (std::size_t i = 0; i < run.sorted_log_probs.size(); ++i) {
      check_finite(fn, "sorted_log_probs", i, run.sorted_log_probs[i]);
      if (run.sorted_log_probs[i] > 1e-9)
        throw_input(fn, where + "sorted_log_probs[" + std::to_string(i) + "] is " +
                            std::to_string(run.sorted_log_probs[i]) + ", but a log-probability must be <= 0");
    }
  } else if (run.log_probs.size() != n * run.classes) {
    throw_input(fn, where + "log_probs has " + std::to_string(run.log_probs.size()) +
                        " values, but must have n x classes = " + std::to_string(n * run.classes));
  }
  if (run.predicted.size() != n)
    throw_input(fn, where + "predicted has " + std::to_string(run.predicted.size()) + " values, but must have " +
                        std::to_string(n));
  for (std::size_t i = 0; i < run.profile.size(); ++i) check_finite(fn, "profile", i, run.profile[i]);
  for (std::size_t i = 0; i < run.log_probs.size(); ++i) {
    check_finite(fn, "log_probs", i, run.log_probs[i]);
    if (run.log_probs[i] > 1e-9)
      throw_input(fn, where + "log_probs[" + std::to_string(i) + "] is " + std::to_string(run.log_probs[i]) +
                          ", but a log-probability must be <= 0");
  }
  for (std::size_t i = 0; i < n; ++i)
    if (run.predicted[i] < 0 || run.predicted[i] >= std::int64_t(run.classes))
      throw_input(fn, where + "predicted[" + std::to_string(i) + "] is " + std::to_string(run.predicted[i]) +
                          ", but must be in [0, " + std::to_string(run.classes) + ")");
  for (std::size_t i = 0; i < n; ++i) {
    check_probability(fn, "confidence", i, run.confidence[i]);
    check_finite(fn, "predictive_entropy", i, run.predictive_entropy[i]);
  }
  for (std::size_t j = 0; j < p; ++j) {
    bool constant = true;
    for (std::size_t i = 1; i < n && constant; ++i) constant = run.profile[i * p + j] == run.profile[j];
    if (constant)
      throw_input(fn, where + "profile column " + std::to_string(j) + " '" + run.profile_names[j] +
                          "' is constant; drop it (a point with S_p = 1 carries no routing information)");
  }
  for (const auto& name : o.only)
    if (std::find_if(kProbeNames.begin(), kProbeNames.end(), [&](const char* k) { return name == k; }) ==
        kProbeNames.end())
      throw_input(fn, "options.only names unknown probe '" + name + "'");
}

}  // namespace

void validate_probe_inputs(const std::vector<AuditRunInput>& runs, const ProbeAuditOptions& o) {
  if (runs.empty()) throw_input("validate_probe_inputs", "no runs given; the probe audit needs at least one");
  for (std::size_t r = 0; r < runs.size(); ++r) validate_run(runs[r], r, o);
}

ProbeDesign make_probe_design(const AuditRunInput& run, std::size_t r, const ProbeAuditOptions& o) {
  validate_run(run, r, o);
  const std::size_t n = run.confidence.size(), P = run.profile_names.size(), K = run.classes;
  ProbeDesign d;
  d.n = n;
  d.run_seed = derive_seed(o.seed, r);
  // The halves of AR-CondCal: ar_condcal uses cross_fit_halves(labels, derive_seed(its seed, 0)) with
  // its seed = derive_seed(audit seed, r).
  d.folds = cross_fit_halves(run.labels, run.cluster, derive_seed(d.run_seed, 0));
  if (o.repeats < 1) throw_input("run_probes", "repeats is " + std::to_string(o.repeats) + ", but must be >= 1");
  d.repeats.push_back(d.folds);
  for (int r = 1; r < o.repeats; ++r)
    d.repeats.push_back(cross_fit_halves(run.labels, run.cluster, derive_seed(d.run_seed, 0x5EED + std::uint64_t(r))));
  d.fold_of.assign(n, 0);
  for (int f = 0; f < 2; ++f)
    for (auto i : d.folds[static_cast<std::size_t>(f)].evaluation) d.fold_of[i] = f;
  d.confidence = run.confidence;
  d.predicted = run.predicted;
  d.classes = K;
  if (run.predicted_class.empty()) {
    d.platt_class = run.predicted;
    d.platt_classes = K;
  } else {
    const auto dense = dense_ids(run.predicted_class, d.platt_classes);
    d.platt_class.assign(dense.begin(), dense.end());
  }

  // Columns. logit c = log p_max − log Σ_{k≠max} p_k from the log-probabilities, so confidences that
  // round to 1 (float32 softmax) keep their order; clipped to ±40.
  auto& cols = d.columns;
  std::vector<double> logit_c(n);
  const bool reduced = run.log_probs.empty();
  const std::size_t R = reduced ? run.sorted_width : K;  // width of the sorted copy
  for (std::size_t i = 0; reduced && i < n; ++i) {
    // log p_max - log(1 - p_max): the rest's mass is everything but the top class
    const double l0 = run.sorted_log_probs[i * R];
    logit_c[i] = std::clamp(l0 - std::log(std::max(-std::expm1(l0), 1e-300)), -40.0, 40.0);
  }
  for (std::size_t i = 0; !reduced && i < n; ++i) {
    const double* lp = &run.log_probs[i * K];
    const auto top = std::size_t(run.predicted[i]);
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < K; ++k)
      if (k != top) m = std::max(m, lp[k]);
    double s = 0.0;
    for (std::size_t k = 0; k < K; ++k)
      if (k != top) s += std::exp(lp[k] - m);
    logit_c[i] = std::clamp(lp[top] - (m + std::log(s)), -40.0, 40.0);
  }
  // The whole output (method.md §6.3), Q = 4K columns: the predicted class one-hot, its interaction with
  // logit c (so a linear read-out is per-predicted-class Platt scaling), the log-softmax in class order,
  // and the same sorted (descending): functions of the outputs that ignore class identity (the margin
  // structure) are far easier to learn from the sorted copy — with the class-ordered copy alone, the
  // balancing score of the full_logit null missed routing that tracks log(p_(2)/p_(3)) and 12/12
  // misspecified-outputs null runs rejected.
  std::vector<std::vector<double>> onehot(K, std::vector<double>(n, 0.0)), slope(K, std::vector<double>(n, 0.0));
  for (std::size_t i = 0; i < n; ++i) {
    const auto k = std::size_t(run.predicted[i]);
    onehot[k][i] = 1.0;
    slope[k][i] = logit_c[i];
  }
  cols.push_back(std::move(logit_c));                                                // 0
  cols.push_back(run.predictive_entropy);                                            // 1
  for (std::size_t j = 0; j < P; ++j) cols.push_back(column(run.profile, n, P, j));  // 2 .. 2+P
  // The reduced form reads the profile centred within each predicted class (the vocabulary's class, not
  // its group; method.md §6.3 "The reduced output form"): a class's mean routing is a function of the
  // outputs, but a probe that sees a rare class only as the pool would read that class's calibration
  // through it (class-dependent null at K = 1000: 9/40 per-run rejections uncentred; stats/splits.hpp centre_within).
  if (reduced && !run.predicted_class.empty())
    for (std::size_t j = 0; j < P; ++j) centre_within(cols[2 + j], d.platt_class, d.platt_classes);
  for (auto& c : onehot) cols.push_back(std::move(c));  // 2+P .. 2+P+K
  for (auto& c : slope) cols.push_back(std::move(c));   // .. 2+P+2K
  if (reduced) {
    // The reduced form (issue 53): no class-ordered copy (a vocabulary's classes one column each would
    // be K columns); the sorted head with the rest's log-mass, R columns.  .. 2+P+2K+R
    for (std::size_t k = 0; k < R; ++k) cols.push_back(column(run.sorted_log_probs, n, R, k));
  } else {
    for (std::size_t k = 0; k < K; ++k) cols.push_back(column(run.log_probs, n, K, k));  // .. 2+P+3K
    std::vector<double> sorted(n * K);
    for (std::size_t i = 0; i < n; ++i) {
      std::copy(&run.log_probs[i * K], &run.log_probs[i * K] + K, &sorted[i * K]);
      std::sort(&sorted[i * K], &sorted[i * K] + K, std::greater<double>());
    }
    for (std::size_t k = 0; k < K; ++k) cols.push_back(column(sorted, n, K, k));  // .. 2+P+4K
  }
  d.sorted_width = R;
  // Shuffled profiles: rows permuted together, over the whole run (as AR-CondCal's shuffled control).
  std::vector<std::size_t> perm_global(n);
  std::iota(perm_global.begin(), perm_global.end(), std::size_t{0});
  Rng(derive_seed(d.run_seed, 101)).shuffle(perm_global);
  std::vector<std::size_t> perm_bins(n);
  std::iota(perm_bins.begin(), perm_bins.end(), std::size_t{0});
  {
    const auto bin = equal_width_bin_index(run.confidence, o.shuffle_bins);
    std::vector<std::vector<std::size_t>> members(o.shuffle_bins);
    for (std::size_t i = 0; i < n; ++i) members[static_cast<std::size_t>(bin[i])].push_back(i);
    Rng rng(derive_seed(d.run_seed, 102));
    for (const auto& idx : members) {
      auto src = idx;
      rng.shuffle(src);
      for (std::size_t k = 0; k < idx.size(); ++k) perm_bins[idx[k]] = src[k];
    }
  }
  for (std::size_t j = 0; j < P; ++j) cols.push_back(pick(cols[2 + j], perm_global));  // 2+P+K ..
  for (std::size_t j = 0; j < P; ++j) cols.push_back(pick(cols[2 + j], perm_bins));    // 2+2P+K ..
  const std::size_t Q = reduced ? 2 * K + R : 4 * K;                                   // output columns
  d.sources.assign(cols.size(), {});
  for (std::size_t j = 0; j < P; ++j) {
    d.sources[2 + j] = {int(j), 0};
    d.sources[2 + P + Q + j] = {int(j), 1};
    d.sources[2 + 2 * P + Q + j] = {int(j), 2};
  }
  d.perm_global = perm_global;
  d.perm_bins = perm_bins;

  auto range = [](std::vector<std::size_t> head, std::size_t from, std::size_t count) {
    for (std::size_t k = 0; k < count; ++k) head.push_back(from + k);
    return head;
  };
  const std::size_t prof = 2, outputs = 2 + P, glob = 2 + P + Q, bins = 2 + 2 * P + Q;
  // The primary probes read the predicted class (its one-hot, the first K output columns) beside logit c
  // (issue 54): a routing effect confined to some classes is an interaction of routing with the class,
  // which an MLP on (logit c, profile) recovered about a fifth of. Their control reads the class too, so a
  // class-dependent calibration is not a routing gain. They still correct the capacity-matched MLP on
  // logit c: as a base, per-class Platt scaling's 2K parameters cost more than the class-blind base at
  // small n (sensitivity recovery R at 0.01 nats, 2 runs x 2,000: -0.56 against +0.10).
  const std::int64_t full_params = mlp_parameter_count(int(1 + K + P), o.mlp.hidden1, o.mlp.hidden2);
  const int h1 = o.mlp.hidden1, h2 = o.mlp.hidden2;
  const auto cm1 = capacity_matched_widths(int(1 + K), full_params),
             cm2 = capacity_matched_widths(int(2 + K), full_params);
  // The routing-augmented probes and their shuffled twins are corrections of a fitted output-only
  // probe (its logit a fixed offset, the correction's output layer starting at zero), so under the null
  // "no change" competes with every trained epoch and the P extra inputs cost ~nothing.
  // Every reported MLP is base + correction, and the probes and controls that are compared share the
  // base, so a correction's refinement of the output-only function (it sees logit c or the sorted
  // probabilities too) is available to the control as well and cannot pass for a routing gain.
  std::vector<ProbeDesign::Spec> specs{
      {"full_vector", range(range({0}, outputs, K), prof, P), h1, h2, "confidence_base"},
      {"capacity_matched", range({0}, outputs, K), cm1.first, cm1.second, "confidence_base"},
      {"shuffled_global", range(range({0}, outputs, K), glob, P), h1, h2, "confidence_base"},
      {"shuffled_within_bins", range(range({0}, outputs, K), bins, P), h1, h2, "confidence_base"},
      {"predictive_entropy", range({0, 1}, outputs, K), cm2.first, cm2.second, "confidence_base"},
      {"full_logit", range({0}, outputs, Q), h1, h2, "full_logit_base"},
      {"full_logit_routing", range(range({0}, outputs, Q), prof, P), h1, h2, "full_logit_base"},
  };
  // The bases (fitted first, not reported by run_probes): the capacity-matched confidence-only MLP and,
  // for the full-logit probes, per-predicted-class Platt scaling: the full-logit MLPs start from it and
  // can only improve on it (an MLP on the 3K + 1 output columns alone lost 0.01 nats to per-class Platt
  // at N = 3000 on class-dependent data).
  const auto cm0 = capacity_matched_widths(1, mlp_parameter_count(int(1 + P), h1, h2));
  std::vector<ProbeDesign::Spec> bases{{"confidence_base", {0}, cm0.first, cm0.second, ""},
                                       {"full_logit_base", {0}, 0, 0, ""}};
  bases[1].per_class_platt = true;
  auto wanted = [&](const std::string& name) {
    return o.only.empty() || std::find(o.only.begin(), o.only.end(), name) != o.only.end();
  };
  d.linear = wanted("linear");
  if (!o.corrections)
    for (auto& spec : specs) spec.base.clear();
  std::vector<std::string> needed;
  for (auto& spec : specs)
    if (wanted(spec.name)) {
      if (!spec.base.empty() && std::find(needed.begin(), needed.end(), spec.base) == needed.end())
        needed.push_back(spec.base);
      d.mlps.push_back(std::move(spec));
    }
  for (const auto& b : bases)
    if (std::find(needed.begin(), needed.end(), b.name) != needed.end()) d.mlps.push_back(b);
  return d;
}

bool reads_profile(const ProbeDesign& d, const ProbeDesign::Spec& spec) {
  for (auto c : spec.cols)
    if (d.sources[c].profile >= 0) return true;
  return false;
}

namespace {

/// logit(p[from .. from + count)), clipped to [1e-7, 1 - 1e-7] first.
std::vector<double> logit_slice(const std::vector<double>& p, std::size_t from, std::size_t count) {
  std::vector<double> out(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double c = std::min(std::max(p[from + i], 1e-7), 1.0 - 1e-7);
    out[i] = std::log(c) - std::log1p(-c);
  }
  return out;
}

/// Per-predicted-class Platt on logit c (design column 0), fitted on `fit` rows with labels y (aligned
/// with fit), each class shrunk towards the pooled fit by a ridge of λ = 4 (about four examples' worth),
/// so a class with few or all-correct examples stays finite. Returns P(correct) on the `fit` rows
/// followed by the `pred` rows.
std::vector<double> per_class_platt(const ProbeDesign& d, const std::vector<std::size_t>& fit,
                                    const std::vector<double>& y, const std::vector<std::size_t>& pred) {
  const auto& x = d.columns[0];
  const PlattFit pooled = fit_platt_on_logits(pick(x, fit), y);
  std::vector<PlattFit> coef(d.platt_classes, pooled);
  std::vector<std::vector<double>> xk(d.platt_classes), yk(d.platt_classes);
  for (std::size_t r = 0; r < fit.size(); ++r) {
    const auto k = std::size_t(d.platt_class[fit[r]]);
    xk[k].push_back(x[fit[r]]);
    yk[k].push_back(y[r]);
  }
  for (std::size_t k = 0; k < d.platt_classes; ++k)
    if (!xk[k].empty()) coef[k] = fit_platt_on_logits(xk[k], yk[k], 100, 4.0, pooled);
  std::vector<double> out;
  out.reserve(fit.size() + pred.size());
  for (const auto* rows : {&fit, &pred})
    for (auto i : *rows) {
      const auto& c = coef[std::size_t(d.platt_class[i])];
      const double p = 1.0 / (1.0 + std::exp(-(c.a * x[i] + c.b)));
      out.push_back(std::min(std::max(p, 1e-7), 1.0 - 1e-7));
    }
  return out;
}

/// Runs job(list[t]) for every t on min(threads, |list|) workers (the calling thread is one of them).
/// The jobs write disjoint slots, so the result depends on neither the thread count nor the order.
void run_on_workers(const std::vector<std::size_t>& list, int threads, const std::function<void(std::size_t)>& job) {
  // parallel_for_index: a job's exception (an interrupt too) is rethrown here, never std::terminate.
  parallel_for_index(list.size(), std::max(1, threads), [&](std::size_t t) { job(list[t]); });
}

/// Which MLP specs correct another's output (base_of[a] = the spec whose logits are a's offsets, -1
/// for none) and which are such a base.
struct CorrectionBases {
  std::vector<int> base_of;
  std::vector<bool> is_base;
};

CorrectionBases correction_bases(const ProbeDesign& d) {
  CorrectionBases cb{std::vector<int>(d.mlps.size(), -1), std::vector<bool>(d.mlps.size(), false)};
  for (std::size_t a = 0; a < d.mlps.size(); ++a)
    for (std::size_t b = 0; b < d.mlps.size(); ++b)
      if (!d.mlps[a].base.empty() && d.mlps[b].name == d.mlps[a].base) {
        cb.base_of[a] = int(b);
        cb.is_base[b] = true;
      }
  return cb;
}

/// The linear probe (Platt scaling of the confidence) of every replicate and fold into out[j].eval[0];
/// a replicate with replicate 0's halves and labels copies its fit.
void fit_linear_replicates(std::vector<ProbeRefit>& out, const ProbeDesign& d,
                           const std::vector<std::array<const std::vector<double>*, 2>>& ys,
                           const std::vector<const std::array<SplitIndices, 2>*>& folds, bool shared_folds,
                           const std::array<bool, 2>& same_labels) {
  for (std::size_t j = 0; j < out.size(); ++j) {
    out[j].names.push_back("linear");
    out[j].parameters[0] = 2;
    for (std::size_t f = 0; f < 2; ++f) {
      if (j > 0 && shared_folds && same_labels[f]) {
        out[j].eval[0][f] = out[0].eval[0][f];
        continue;
      }
      const auto& s = (*folds[j])[f];
      const auto platt = fit_platt(pick(d.confidence, s.calibration), pick(*ys[j][f], s.calibration));
      out[j].eval[0][f] = apply_platt(platt, pick(d.confidence, s.evaluation));
    }
  }
}

}  // namespace

std::vector<ProbeRefit> fit_probe_design_replicates(const ProbeDesign& d,
                                                    const std::vector<std::array<const std::vector<double>*, 2>>& ys,
                                                    const MlpProbeOptions& mlp,
                                                    const std::array<std::uint64_t, 2>& seeds,
                                                    const std::vector<std::array<MlpWeights, 2>>* warm,
                                                    bool keep_weights, const std::vector<ReplicateSpec>* specs) {
  const char* fn = "fit_probe_design";
  if (ys.empty()) throw_input(fn, "no label sets (ys is empty)");
  if (specs && specs->size() != ys.size())
    throw_input(fn, "specs has " + std::to_string(specs->size()) + " entries, but ys has " + std::to_string(ys.size()));
  for (std::size_t j = 0; j < ys.size(); ++j)
    for (int f = 0; f < 2; ++f) {
      const std::string name = "ys[" + std::to_string(j) + "][" + std::to_string(f) + "]";
      if (!ys[j][std::size_t(f)]) throw_input(fn, name + " is null");
      check_same_size(fn, name.c_str(), ys[j][std::size_t(f)]->size(), "n", d.n);
    }
  const bool linear = d.linear && !mlp.soft_labels;
  const std::size_t probes = d.mlps.size() + (linear ? 1 : 0);
  if (warm && warm->size() != probes)
    throw_input(fn,
                "warm has " + std::to_string(warm->size()) + " probes, but the design fits " + std::to_string(probes));
  const std::size_t R = ys.size();
  std::vector<const std::array<SplitIndices, 2>*> fold_sets(R);  // replicate j's halves
  for (std::size_t j = 0; j < R; ++j) fold_sets[j] = specs && (*specs)[j].folds ? (*specs)[j].folds : &d.folds;
  auto folds_of = [&](std::size_t j) -> const std::array<SplitIndices, 2>& { return *fold_sets[j]; };
  auto perm_of = [&](std::size_t j) -> const std::vector<std::size_t>* {
    return specs ? (*specs)[j].profile_permutation : nullptr;
  };
  bool shared_folds = true, any_perm = false;
  for (std::size_t j = 0; j < R; ++j) {
    shared_folds = shared_folds && &folds_of(j) == &folds_of(0);
    any_perm = any_perm || perm_of(j) != nullptr;
  }
  // Replicates that cannot differ for a probe that ignores the profile: same halves, same labels.
  std::array<bool, 2> same_labels{true, true};
  for (std::size_t f = 0; f < 2; ++f)
    for (std::size_t j = 1; j < R; ++j) same_labels[f] = same_labels[f] && ys[j][f] == ys[0][f];
  // Row values of a design column for replicate j (profile-derived columns through its permutation).
  auto value = [&](std::size_t c, std::size_t row, const std::vector<std::size_t>* perm) {
    const auto& src = d.sources[c];
    if (src.profile < 0 || !perm) return d.columns[c][row];
    const std::size_t mapped = src.rows == 0 ? row : src.rows == 1 ? d.perm_global[row] : d.perm_bins[row];
    return d.columns[2 + std::size_t(src.profile)][(*perm)[mapped]];
  };
  auto gather_rows = [&](const std::vector<std::size_t>& cols, const std::vector<std::size_t>& idx,
                         const std::vector<std::size_t>* perm) {
    std::vector<double> x(idx.size() * cols.size());
    for (std::size_t r = 0; r < idx.size(); ++r)
      for (std::size_t k = 0; k < cols.size(); ++k) x[r * cols.size() + k] = value(cols[k], idx[r], perm);
    return x;
  };

  std::vector<ProbeRefit> out(R);
  for (auto& o : out) {
    o.eval.resize(probes);
    o.weights.resize(probes);
    o.mean_epochs.assign(probes, 0.0);
    o.parameters.assign(probes, 0);
  }
  std::size_t k = 0;
  if (linear) {
    fit_linear_replicates(out, d, ys, fold_sets, shared_folds, same_labels);
    ++k;
  }
  // One stacked fit per (MLP probe, fold): independent jobs, run on mlp.threads workers; each job
  // writes only its own slots, so the result does not depend on the thread count or the order.
  const std::size_t first_mlp = k, jobs = 2 * d.mlps.size();
  std::vector<std::exception_ptr> errors(jobs);
  std::vector<double> epochs(R * jobs, 0.0);  // [replicate][job] mean epochs, summed over folds below
  // Correction probes read their base's fitted logits on the calibration rows (training offsets) and
  // on the evaluation rows (prediction offsets): the base probes run first and keep them.
  const CorrectionBases bases = correction_bases(d);
  const std::vector<int>& base_of = bases.base_of;
  const std::vector<bool>& is_base = bases.is_base;
  // base_logit[job][j] = {calibration-row logits, evaluation-row logits} of replicate j (bases only).
  std::vector<std::vector<std::array<std::vector<double>, 2>>> base_logit(jobs);
  auto run_job = [&](std::size_t job) {
    try {
      const auto& spec = d.mlps[job / 2];
      const std::size_t f = job % 2, kk = first_mlp + job / 2;
      const bool profile = reads_profile(d, spec);
      const bool rows_shared = shared_folds && !(profile && any_perm);
      const int base = base_of[job / 2];
      const std::size_t base_job = base >= 0 ? 2 * std::size_t(base) + f : 0;
      // A base's result must be replicated per replicate only if its corrections differ; a probe that
      // cannot differ between replicates is fitted once (as replicate 0) and copied.
      const bool once = rows_shared && same_labels[f] && R > 1;
      const std::size_t fitted = once ? 1 : R;
      const std::size_t nc = d.folds[f].calibration.size();
      // The halves' sizes of replicate j: the design's when the rows are shared, else its own (splits
      // by whole clusters of unequal size give halves of unequal size).
      auto halves = [&](std::size_t j) {
        const auto& s = folds_of(rows_shared ? 0 : j)[f];
        return std::pair<std::size_t, std::size_t>{s.calibration.size(), s.evaluation.size()};
      };
      MlpProbeOptions mo = mlp;
      mo.hidden1 = spec.hidden1;
      mo.hidden2 = spec.hidden2;
      mo.seed = seeds[f];
      mo.warm_start = warm ? &(*warm)[kk][f] : nullptr;
      std::vector<std::vector<double>> pred;
      std::vector<MlpProbeInfo> infos;
      if (spec.per_class_platt) {  // a base: its calibration rows (in-sample) then its evaluation rows
        for (std::size_t j = 0; j < fitted; ++j) {
          const auto& s = folds_of(j)[f];
          pred.push_back(per_class_platt(d, s.calibration, pick(*ys[j][f], s.calibration), s.evaluation));
          MlpProbeInfo info;
          info.parameters = std::int64_t(2 * d.classes);
          infos.push_back(std::move(info));
        }
      } else {
        // Rows: one set shared by every replicate, or one per replicate (its halves, its permutation),
        // gathered when the fit asks for them (MlpRowSource), so a stack never holds every replicate's
        // rows in double. A base also predicts its own calibration rows (in-sample), the training offsets
        // of its corrections.
        std::vector<std::vector<double>> yc(fitted);
        std::vector<const std::vector<double>*> yp(fitted);
        for (std::size_t j = 0; j < fitted; ++j) {
          yc[j] = pick(*ys[j][f], folds_of(j)[f].calibration);
          yp[j] = &yc[j];
        }
        // Stacks of at most stack_size replicates bound the memory (rows, activations), and a stack holds
        // replicates whose halves have one size (each replicate is trained on its own, so its result does
        // not depend on the stack it is in).
        const std::size_t stack = stack_size(rows_shared, nc, spec.cols.size());
        for (std::size_t j0 = 0, j1 = 0; j0 < fitted; j0 = j1) {
          const auto [ncj, nej] = halves(j0);
          j1 = j0 + 1;
          while (j1 < fitted && j1 - j0 < stack && halves(j1) == std::pair<std::size_t, std::size_t>{ncj, nej}) ++j1;
          const std::size_t me = is_base[job / 2] ? ncj + nej : nej;
          const std::vector<const std::vector<double>*> part(yp.begin() + long(j0), yp.begin() + long(j1));
          MlpRowSource rows;
          rows.train_sets = rows.eval_sets = rows_shared ? 1 : j1 - j0;
          rows.train = [&, j0](std::size_t set, std::vector<double>& buf) -> const std::vector<double>& {
            const std::size_t j = rows_shared ? 0 : j0 + set;
            return buf = gather_rows(spec.cols, folds_of(j)[f].calibration, perm_of(j));
          };
          rows.eval = [&, j0](std::size_t set, std::vector<double>& buf) -> const std::vector<double>& {
            const std::size_t j = rows_shared ? 0 : j0 + set;
            const auto& s = folds_of(j)[f];
            buf = is_base[job / 2] ? gather_rows(spec.cols, s.calibration, perm_of(j)) : std::vector<double>{};
            const auto xe = gather_rows(spec.cols, s.evaluation, perm_of(j));
            buf.insert(buf.end(), xe.begin(), xe.end());
            return buf;
          };
          std::vector<MlpProbeInfo> part_infos;
          MlpOffsets offsets;
          if (base >= 0)
            for (std::size_t j = j0; j < j1; ++j) {
              offsets.train.push_back(base_logit[base_job][j][0]);
              offsets.eval.push_back(base_logit[base_job][j][1]);
            }
          auto part_pred = fit_predict_mlp_probes_source(rows, ncj, spec.cols.size(), part, me, mo, &part_infos,
                                                         base >= 0 ? &offsets : nullptr);
          for (auto& p : part_pred) pred.push_back(std::move(p));
          for (auto& i : part_infos) infos.push_back(std::move(i));
        }
      }
      for (std::size_t j = fitted; j < R; ++j) {  // copies of the single fit
        pred.push_back(pred[0]);
        infos.push_back(infos[0]);
      }
      if (is_base[job / 2]) {
        base_logit[job].resize(R);
        for (std::size_t j = 0; j < R; ++j) {
          const auto [ncj, nej] = halves(j < fitted ? j : 0);
          base_logit[job][j] = {logit_slice(pred[j], 0, ncj), logit_slice(pred[j], ncj, nej)};
          pred[j].erase(pred[j].begin(), pred[j].begin() + long(ncj));
        }
      }
      for (std::size_t j = 0; j < R; ++j) {
        out[j].eval[kk][f] = std::move(pred[j]);
        if (keep_weights) out[j].weights[kk][f] = std::move(infos[j].weights);
        if (f == 0) out[j].parameters[kk] = infos[j].parameters;  // the same for both folds
        epochs[j * jobs + job] = infos[j].mean_epochs;
      }
    } catch (...) {
      errors[job] = std::current_exception();
    }
  };
  // Phase 0: probes fitted on their own; phase 1: corrections (their bases are done).
  for (int phase = 0; phase < 2; ++phase) {
    std::vector<std::size_t> list;
    for (std::size_t job = 0; job < jobs; ++job)
      if ((base_of[job / 2] >= 0) == (phase == 1)) list.push_back(job);
    run_on_workers(list, mlp.threads, run_job);
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);  // the first failing job in (probe, fold) order
  }
  for (std::size_t j = 0; j < R; ++j)
    for (std::size_t job = 0; job < jobs; ++job)
      out[j].mean_epochs[first_mlp + job / 2] += 0.5 * epochs[j * jobs + job];
  for (const auto& spec : d.mlps)
    for (auto& o : out) o.names.push_back(spec.name);
  return out;
}

ProbeRefit fit_probe_design(const ProbeDesign& d, const std::array<const std::vector<double>*, 2>& y,
                            const MlpProbeOptions& mlp, const std::array<std::uint64_t, 2>& seeds,
                            const std::vector<std::array<MlpWeights, 2>>* warm) {
  return std::move(fit_probe_design_replicates(d, {y}, mlp, seeds, warm, true)[0]);
}

RunProbeResult run_probes(const AuditRunInput& run, std::size_t r, const ProbeAuditOptions& o) {
  const auto d = make_probe_design(run, r, o);
  const std::size_t n = d.n, J = d.repeats.size();
  // Every repeat is one replicate of a stacked fit with its own halves and the real labels. Common
  // random numbers: every probe of a fold shares the inner split, initial seed and batch order, so
  // probe-control differences are not inflated by training noise.
  std::vector<ReplicateSpec> specs(J);
  std::vector<std::array<const std::vector<double>*, 2>> ys(J, {&run.correct, &run.correct});
  for (std::size_t j = 0; j < J; ++j) specs[j].folds = &d.repeats[j];
  const auto refits = fit_probe_design_replicates(
      d, ys, o.mlp, {derive_seed(d.run_seed, 1000), derive_seed(d.run_seed, 1001)}, nullptr, false, &specs);
  RunProbeResult out;
  out.run = run.run;
  out.cell = run.cell;
  out.n = n;
  out.profile_names = run.profile_names;
  const auto& names = refits[0].names;
  for (std::size_t k = 0; k < names.size(); ++k) {
    ProbeFit fit;
    fit.name = names[k];
    fit.parameters = refits[0].parameters[k];
    if (std::find_if(kProbeNames.begin(), kProbeNames.end(), [&](const char* p) { return fit.name == p; }) ==
        kProbeNames.end())
      continue;  // a base (confidence_base, full_logit_base): its corrections carry it
    if (fit.name == "linear") {
      fit.inputs = 1;
    } else {
      const auto& spec = d.mlps[k - (d.linear ? 1 : 0)];
      fit.inputs = spec.cols.size();
      fit.hidden1 = spec.hidden1;
      fit.hidden2 = spec.hidden2;
    }
    fit.prediction.assign(n, 0.0);
    for (std::size_t j = 0; j < J; ++j) {
      fit.mean_epochs += refits[j].mean_epochs[k] / double(J);
      for (std::size_t f = 0; f < 2; ++f) {
        const auto& ev = d.repeats[j][f].evaluation;
        const auto& q = refits[j].eval[k][f];
        for (std::size_t i = 0; i < ev.size(); ++i) fit.prediction[ev[i]] += q[i] / double(J);
        fit.split_scores.push_back(score_half(q, pick(run.correct, ev), o.ece_bins));
      }
    }
    for (const auto& sc : fit.split_scores) {
      const double w = 1.0 / double(fit.split_scores.size());
      fit.scores.log_loss += w * sc.log_loss;
      fit.scores.brier += w * sc.brier;
      fit.scores.ece += w * sc.ece;
    }
    out.probes.push_back(std::move(fit));
  }
  auto find = [&](const char* name) -> const ProbeFit* {
    for (const auto& p : out.probes)
      if (p.name == name) return &p;
    return nullptr;
  };
  const double ratio = double(d.folds[0].evaluation.size()) / double(d.folds[0].calibration.size());
  for (const auto& spec : kProbeComparisons) {
    const ProbeFit *a = find(spec.probe), *b = find(spec.control);
    if (!a || !b) continue;
    out.comparisons.push_back(compare_probes(*a, *b, spec.name, ratio, 1.0 - o.alpha));
  }
  return out;
}

ProbeFamily run_probe_family(const std::vector<AuditRunInput>& runs, const ProbeAuditOptions& o) {
  if (!o.only.empty()) throw_input("run_probe_family", "options.only must be empty: the family needs every probe");
  validate_probe_inputs(runs, o);
  const auto t0 = std::chrono::steady_clock::now();
  ProbeFamily fam;
  for (std::size_t r = 0; r < runs.size(); ++r) fam.runs.push_back(run_probes(runs[r], r, o));
  fam.tests = across_run_probe_tests(fam.runs, o.alpha);
  fam.restarts = o.mlp.restarts;
  fam.repeats = o.repeats;
  fam.max_epochs = o.mlp.max_epochs;
  fam.patience = o.mlp.patience;
  fam.batch_size = o.mlp.batch_size;
  fam.lr = o.mlp.lr;
  fam.weight_decay = o.mlp.weight_decay;
  fam.inner_val = o.mlp.inner_val;
  fam.alpha = o.alpha;
  fam.shuffle_bins = o.shuffle_bins;
  fam.ece_bins = o.ece_bins;
  fam.seed = o.seed;
  fam.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return fam;
}

}  // namespace arcal
