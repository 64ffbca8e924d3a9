#include "audit/condcal.hpp"

#include "calib/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "core/check.hpp"
#include "core/rng.hpp"
#include "stats/kernels.hpp"
#include "stats/splits.hpp"

namespace arcal {

namespace {

using Columns = std::vector<std::vector<double>>;  // feature columns, each [n]

std::vector<double> rows(const Columns& cols, const std::vector<std::size_t>& idx) {
  const std::size_t d = cols.size();
  std::vector<double> x(idx.size() * d);
  for (std::size_t r = 0; r < idx.size(); ++r)
    for (std::size_t k = 0; k < d; ++k) x[r * d + k] = cols[k][idx[r]];
  return x;
}

template <class T>
std::vector<T> pick(const std::vector<T>& v, const std::vector<std::size_t>& idx) {
  std::vector<T> out(idx.size());
  for (std::size_t r = 0; r < idx.size(); ++r) out[r] = v[idx[r]];
  return out;
}

std::vector<double> fit_predict(const Columns& cols, const std::vector<double>& correct,
                                const std::vector<std::size_t>& train, const std::vector<std::size_t>& test,
                                double multiple, const CondCalOptions& o) {
  const std::size_t d = cols.size();
  std::vector<double> h(d);
  for (std::size_t k = 0; k < d; ++k) h[k] = scott_bandwidth(pick(cols[k], train), d, multiple);
  NadarayaWatsonOptions nw;
  nw.pseudo_count = o.pseudo_count;
  nw.clip_low = o.clip;
  nw.clip_high = 1.0 - o.clip;
  nw.threads = o.threads;
  return NadarayaWatson(rows(cols, train), pick(correct, train), d, h, nw).predict(rows(cols, test));
}

double nll(const std::vector<double>& est, const std::vector<double>& a) {
  double s = 0.0;
  for (std::size_t i = 0; i < est.size(); ++i) s -= a[i] > 0.5 ? std::log(est[i]) : std::log1p(-est[i]);
  return s / static_cast<double>(est.size());
}

CalibrationScores score(const std::vector<double>& est, const std::vector<double>& a, const std::vector<int>& tertile,
                        std::size_t bins) {
  CalibrationScores s;
  s.ece = binary_ece(est, a, bins);
  s.nll = nll(est, a);
  for (std::size_t i = 0; i < est.size(); ++i) s.brier += (est[i] - a[i]) * (est[i] - a[i]);
  s.brier /= static_cast<double>(est.size());
  for (int t = 0; t < 3; ++t) {
    std::vector<double> e, y;
    for (std::size_t i = 0; i < est.size(); ++i)
      if (tertile[i] == t) {
        e.push_back(est[i]);
        y.push_back(a[i]);
      }
    if (!e.empty()) s.worst_tertile_ece = std::max(s.worst_tertile_ece, binary_ece(e, y, bins));
  }
  return s;
}

void accumulate(CalibrationScores& into, const CalibrationScores& s, double w) {
  into.ece += w * s.ece;
  into.worst_tertile_ece += w * s.worst_tertile_ece;
  into.nll += w * s.nll;
  into.brier += w * s.brier;
}

}  // namespace

double binary_ece(const std::vector<double>& estimate, const std::vector<double>& correct, std::size_t bins) {
  check_same_size("binary_ece", "estimate", estimate.size(), "correct", correct.size());
  if (estimate.empty()) return 0.0;
  // The calibration core's top-label ECE (method.md §4 equal-width convention) of the estimate.
  return expected_calibration_error(estimate, correct, static_cast<int>(bins));
}

CondCalResult ar_condcal(const std::vector<double>& confidence, const std::vector<double>& correct,
                         const std::vector<double>& statistic, const std::vector<double>& predictive_entropy,
                         const std::vector<std::int64_t>& labels, const CondCalOptions& o,
                         const std::vector<std::int64_t>& cluster) {
  const char* fn = "ar_condcal";
  if (!cluster.empty()) check_same_size(fn, "confidence", confidence.size(), "cluster", cluster.size());
  const std::size_t n = confidence.size();
  check_same_size(fn, "confidence", n, "correct", correct.size());
  check_same_size(fn, "confidence", n, "statistic", statistic.size());
  check_same_size(fn, "confidence", n, "predictive_entropy", predictive_entropy.size());
  check_same_size(fn, "confidence", n, "labels", labels.size());
  if (o.multiples.empty()) throw_input(fn, "multiples is empty; give at least one Scott multiple");
  for (std::size_t k = 0; k < o.multiples.size(); ++k)
    if (!(o.multiples[k] > 0.0)) throw_index(fn, "multiples", k, std::to_string(o.multiples[k]), "positive");
  if (o.cv_folds < 2) throw_input(fn, "cv_folds is " + std::to_string(o.cv_folds) + ", but must be >= 2");
  if (n < 4 * static_cast<std::size_t>(o.cv_folds))
    throw_input(fn, "confidence has " + std::to_string(n) + " examples, but each half needs >= 2 * cv_folds");
  for (std::size_t i = 0; i < n; ++i) {
    check_probability(fn, "confidence", i, confidence[i]);
    if (!(correct[i] == 0.0 || correct[i] == 1.0)) throw_index(fn, "correct", i, std::to_string(correct[i]), "0 or 1");
    check_finite(fn, "statistic", i, statistic[i]);
    check_finite(fn, "predictive_entropy", i, predictive_entropy[i]);
  }
  if (std::all_of(statistic.begin(), statistic.end(), [&](double v) { return v == statistic[0]; }))
    throw_input(fn, "statistic is constant; the probe needs a varying routing statistic");

  std::vector<double> logit_c(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double c = std::clamp(confidence[i], 1e-6, 1.0 - 1e-6);
    logit_c[i] = std::log(c / (1.0 - c));
  }
  // s shuffled within equal-width confidence bins (breaks any s-correctness link beyond confidence).
  std::vector<double> shuffled = statistic;
  {
    const auto bin = equal_width_bin_index(confidence, o.shuffle_bins);
    std::vector<std::vector<std::size_t>> members(o.shuffle_bins);
    for (std::size_t i = 0; i < n; ++i) members[static_cast<std::size_t>(bin[i])].push_back(i);
    Rng rng(derive_seed(o.seed, 1));
    for (const auto& idx : members) {
      std::vector<double> vals(idx.size());
      for (std::size_t k = 0; k < idx.size(); ++k) vals[k] = statistic[idx[k]];
      rng.shuffle(vals);
      for (std::size_t k = 0; k < idx.size(); ++k) shuffled[idx[k]] = vals[k];
    }
  }
  struct ArmSpec {
    std::string name;
    Columns cols;
  };
  const std::vector<ArmSpec> specs = {{"probe", {logit_c, statistic}},
                                      {"confidence_only", {logit_c}},
                                      {"predictive_entropy", {logit_c, predictive_entropy}},
                                      {"shuffled_within_bins", {logit_c, shuffled}}};
  CondCalResult result;
  result.n = n;
  for (const auto& s : specs) {
    CondCalArm arm;
    arm.name = s.name;
    arm.dims = s.cols.size();
    result.arms.push_back(arm);
  }
  const auto folds = cross_fit_halves(labels, cluster, derive_seed(o.seed, 0));
  for (std::size_t f = 0; f < 2; ++f) {
    const auto& cal = folds[f].calibration;
    const auto& eval = folds[f].evaluation;
    // Routing tertiles of the evaluation half from the calibration half's cut points.
    const auto s_cal = pick(statistic, cal);
    const auto g = equal_mass_group_index(s_cal, 3);
    double cut0 = -std::numeric_limits<double>::infinity(), cut1 = cut0;
    for (std::size_t k = 0; k < s_cal.size(); ++k) {
      if (g[k] == 0) cut0 = std::max(cut0, s_cal[k]);
      if (g[k] <= 1) cut1 = std::max(cut1, s_cal[k]);
    }
    std::vector<int> tertile(eval.size());
    for (std::size_t k = 0; k < eval.size(); ++k) {
      const double v = statistic[eval[k]];
      tertile[k] = v <= cut0 ? 0 : (v <= cut1 ? 1 : 2);
    }
    const auto a_eval = pick(correct, eval);
    std::vector<double> raw = pick(confidence, eval);
    for (auto& c : raw) c = std::clamp(c, o.clip, 1.0 - o.clip);
    accumulate(result.uncalibrated, score(raw, a_eval, tertile, o.ece_bins), 0.5);
    // Inner CV folds shared by every arm (matched).
    if (!cluster.empty()) {
      const auto cal_clusters = pick(cluster, cal);
      const std::set<std::int64_t> distinct(cal_clusters.begin(), cal_clusters.end());
      if (distinct.size() < static_cast<std::size_t>(o.cv_folds))
        throw_input(
            fn, "a cross-fit half holds " + std::to_string(distinct.size()) + " clusters, but the " +
                    std::to_string(o.cv_folds) + "-fold bandwidth CV splits whole clusters and needs at least " +
                    std::to_string(o.cv_folds) + " (trace more sequences, or run without AR-CondCal: --no-condcal)");
    }
    const auto inner = kfold_assignment(cal.size(), o.cv_folds, cluster.empty() ? cluster : pick(cluster, cal),
                                        derive_seed(o.seed, 10 + f));
    for (std::size_t a = 0; a < specs.size(); ++a) {
      const auto& cols = specs[a].cols;
      for (std::size_t d = 0; d < cols.size(); ++d) {
        const auto col = pick(cols[d], cal);
        if (std::all_of(col.begin(), col.end(), [&](double v) { return v == col[0]; }))
          throw_input(fn, "feature " + std::to_string(d) + " of arm '" + specs[a].name +
                              "' is constant on a calibration half; a bandwidth needs spread");
      }
      std::size_t best_cv = 0;
      double best_cv_nll = std::numeric_limits<double>::infinity();
      for (std::size_t m = 0; m < o.multiples.size(); ++m) {
        double total = 0.0;
        for (int k = 0; k < o.cv_folds; ++k) {
          std::vector<std::size_t> tr, te;
          for (std::size_t r = 0; r < cal.size(); ++r) (inner[r] == k ? te : tr).push_back(cal[r]);
          const auto est = fit_predict(cols, correct, tr, te, o.multiples[m], o);
          total += nll(est, pick(correct, te)) * static_cast<double>(te.size());
        }
        total /= static_cast<double>(cal.size());
        if (total < best_cv_nll) {
          best_cv_nll = total;
          best_cv = m;
        }
      }
      std::size_t best_oracle = 0;
      CalibrationScores oracle_scores, cv_scores;
      double best_ece = std::numeric_limits<double>::infinity();
      for (std::size_t m = 0; m < o.multiples.size(); ++m) {
        const auto est = fit_predict(cols, correct, cal, eval, o.multiples[m], o);
        const auto s = score(est, a_eval, tertile, o.ece_bins);
        auto& fixed = result.arms[a].by_multiple;
        if (fixed.size() < o.multiples.size()) fixed.resize(o.multiples.size());
        accumulate(fixed[m], s, 0.5);
        if (m == best_cv) cv_scores = s;
        if (s.ece < best_ece) {
          best_ece = s.ece;
          best_oracle = m;
          oracle_scores = s;
        }
      }
      auto& arm = result.arms[a];
      accumulate(arm.cv_nll, cv_scores, 0.5);
      accumulate(arm.oracle_ece, oracle_scores, 0.5);
      arm.multiple_cv[f] = o.multiples[best_cv];
      arm.multiple_oracle[f] = o.multiples[best_oracle];
    }
  }
  return result;
}

CondCalBand seed_variance_band(const std::vector<CondCalResult>& runs, bool oracle, const std::string& arm) {
  const char* fn = "seed_variance_band";
  if (runs.empty()) throw_input(fn, "runs is empty");
  std::vector<CalibrationScores> s;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    auto it =
        std::find_if(runs[r].arms.begin(), runs[r].arms.end(), [&](const CondCalArm& a) { return a.name == arm; });
    if (it == runs[r].arms.end())
      throw_index(fn, "runs", r, "a result without arm '" + arm + "'", "a result with that arm");
    s.push_back(oracle ? it->oracle_ece : it->cv_nll);
  }
  auto band = [&](double CalibrationScores::*field) {
    SeedBand b;
    b.runs = s.size();
    for (const auto& x : s) b.mean += x.*field;
    b.mean /= static_cast<double>(s.size());
    if (s.size() > 1) {
      double ss = 0.0;
      for (const auto& x : s) ss += (x.*field - b.mean) * (x.*field - b.mean);
      b.sd = std::sqrt(ss / static_cast<double>(s.size() - 1));
    }
    return b;
  };
  return {band(&CalibrationScores::ece), band(&CalibrationScores::worst_tertile_ece), band(&CalibrationScores::nll),
          band(&CalibrationScores::brier)};
}

}  // namespace arcal
