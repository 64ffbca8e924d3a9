#include "audit/probe_compare.hpp"

#include <algorithm>
#include <cmath>

#include "audit/condcal.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "stats/multiplicity.hpp"
#include "stats/paired_tests.hpp"
#include "stats/splits.hpp"

namespace arcal {

namespace {

constexpr double kFloor = 1e-15;  // binary_log_loss's clipping (calib/metrics.cpp)

double example_log_loss(double q, double a) {
  const double p = std::min(std::max(q, kFloor), 1.0 - kFloor);
  return -(a * std::log(p) + (1.0 - a) * std::log1p(-p));
}

/// Per-example quantities of one estimate, so that any weighted resample's metrics are O(n).
struct ExampleTerms {
  std::vector<double> log_loss, brier;
  std::vector<int> bin;
};

ExampleTerms terms(const std::vector<double>& q, const std::vector<double>& a, std::size_t bins) {
  ExampleTerms t;
  t.log_loss.resize(q.size());
  t.brier.resize(q.size());
  for (std::size_t i = 0; i < q.size(); ++i) {
    t.log_loss[i] = example_log_loss(q[i], a[i]);
    t.brier[i] = (q[i] - a[i]) * (q[i] - a[i]);
  }
  t.bin = equal_width_bin_index(q, bins);
  return t;
}

/// Fold-mean metrics of an estimate with example weights w [n] (w = 1: the plain scores).
ProbeScores weighted_scores(const std::vector<double>& q, const std::vector<double>& a, const ExampleTerms& t,
                            const std::vector<int>& fold, const std::vector<double>& w, std::size_t bins) {
  ProbeScores out;
  std::vector<double> cn(2 * bins), cq(2 * bins), ca(2 * bins);
  std::array<double, 2> wsum{}, ll{}, br{};
  std::fill(cn.begin(), cn.end(), 0.0);
  std::fill(cq.begin(), cq.end(), 0.0);
  std::fill(ca.begin(), ca.end(), 0.0);
  for (std::size_t i = 0; i < q.size(); ++i) {
    if (w[i] == 0.0) continue;
    const auto f = static_cast<std::size_t>(fold[i]);
    wsum[f] += w[i];
    ll[f] += w[i] * t.log_loss[i];
    br[f] += w[i] * t.brier[i];
    const std::size_t b = f * bins + static_cast<std::size_t>(t.bin[i]);
    cq[b] += w[i] * q[i];
    ca[b] += w[i] * a[i];
  }
  for (std::size_t f = 0; f < 2; ++f) {
    double e = 0.0;
    for (std::size_t b = 0; b < bins; ++b) e += std::abs(ca[f * bins + b] - cq[f * bins + b]);
    out.log_loss += 0.5 * ll[f] / wsum[f];
    out.brier += 0.5 * br[f] / wsum[f];
    out.ece += 0.5 * e / wsum[f];
  }
  return out;
}

void check_inputs(const char* fn, const std::vector<double>& q, const std::vector<double>& a,
                  const std::vector<int>& fold) {
  check_same_size(fn, "estimate", q.size(), "correct", a.size());
  check_same_size(fn, "estimate", q.size(), "fold", fold.size());
  std::array<std::size_t, 2> count{};
  for (std::size_t i = 0; i < q.size(); ++i) {
    check_probability(fn, "estimate", i, q[i]);
    if (a[i] != 0.0 && a[i] != 1.0) throw_index(fn, "correct", i, std::to_string(a[i]), "0 or 1");
    if (fold[i] != 0 && fold[i] != 1) throw_index(fn, "fold", i, std::to_string(fold[i]), "0 or 1");
    ++count[static_cast<std::size_t>(fold[i])];
  }
  if (count[0] == 0 || count[1] == 0) throw_input(fn, "fold 0 or fold 1 has no evaluation example");
}

std::vector<std::size_t> fold_members(const std::vector<int>& fold, int f) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < fold.size(); ++i)
    if (fold[i] == f) out.push_back(i);
  return out;
}

double metric_of(const ProbeScores& s, std::size_t m) { return m == 0 ? s.log_loss : m == 1 ? s.brier : s.ece; }

}  // namespace

ProbeScores score_probe(const std::vector<double>& q, const std::vector<double>& a, const std::vector<int>& fold,
                        std::size_t ece_bins) {
  check_inputs("score_probe", q, a, fold);
  return weighted_scores(q, a, terms(q, a, ece_bins), fold, std::vector<double>(q.size(), 1.0), ece_bins);
}

RunComparison compare_probes(const ProbeFit& probe, const ProbeFit& control, const std::string& name,
                             const std::vector<double>& a, const std::vector<int>& fold, int draws,
                             std::uint64_t seed, std::size_t bins) {
  const char* fn = "compare_probes";
  check_inputs(fn, probe.prediction, a, fold);
  check_inputs(fn, control.prediction, a, fold);
  if (draws < 1) throw_input(fn, "draws is " + std::to_string(draws) + ", but must be >= 1");
  const auto tp = terms(probe.prediction, a, bins), tc = terms(control.prediction, a, bins);
  const std::size_t n = a.size();
  std::vector<double> w(n, 1.0);
  const auto sp = weighted_scores(probe.prediction, a, tp, fold, w, bins);
  const auto sc = weighted_scores(control.prediction, a, tc, fold, w, bins);
  const std::array<std::vector<std::size_t>, 2> members{fold_members(fold, 0), fold_members(fold, 1)};
  std::array<std::vector<double>, 3> dd;
  std::vector<std::uint32_t> counts;
  for (int b = 0; b < draws; ++b) {
    std::fill(w.begin(), w.end(), 0.0);
    for (int f = 0; f < 2; ++f) {
      const auto& m = members[static_cast<std::size_t>(f)];
      bootstrap_counts(m.size(), derive_seed(seed, static_cast<std::uint64_t>(f)), static_cast<std::uint64_t>(b),
                       counts);
      for (std::size_t k = 0; k < m.size(); ++k) w[m[k]] = counts[k];
    }
    const auto rp = weighted_scores(probe.prediction, a, tp, fold, w, bins);
    const auto rc = weighted_scores(control.prediction, a, tc, fold, w, bins);
    for (std::size_t m = 0; m < 3; ++m) dd[m].push_back(metric_of(rp, m) - metric_of(rc, m));
  }
  RunComparison out;
  out.name = name;
  out.probe = probe.name;
  out.control = control.name;
  std::array<MetricDelta*, 3> dst{&out.log_loss, &out.brier, &out.ece};
  for (std::size_t m = 0; m < 3; ++m) {
    std::sort(dd[m].begin(), dd[m].end());
    dst[m]->delta = metric_of(sp, m) - metric_of(sc, m);
    dst[m]->ci = {quantile_sorted(dd[m], 0.025), quantile_sorted(dd[m], 0.975)};
  }
  return out;
}

std::string probe_verdict(double mean_delta, double p_holm, double alpha) {
  if (p_holm <= alpha && mean_delta < 0) return "gain";
  if (p_holm <= alpha && mean_delta > 0) return "loss";
  return "no detected difference";
}

std::vector<AcrossRunTest> across_run_probe_tests(const std::vector<RunProbeResult>& runs, int draws,
                                                  std::uint64_t seed, double alpha) {
  const char* fn = "across_run_probe_tests";
  if (runs.empty()) throw_input(fn, "no runs; the across-run tests need at least one");
  std::vector<AcrossRunTest> out;
  for (const auto& spec : kProbeComparisons) {
    for (std::size_t m = 0; m < kProbeMetrics.size(); ++m) {
      AcrossRunTest t;
      t.comparison = spec.name;
      t.metric = kProbeMetrics[m];
      for (std::size_t r = 0; r < runs.size(); ++r) {
        const auto& cs = runs[r].comparisons;
        auto it = std::find_if(cs.begin(), cs.end(), [&](const RunComparison& c) { return c.name == spec.name; });
        if (it == cs.end())
          throw_input(fn, "runs[" + std::to_string(r) + "] '" + runs[r].run + "' lacks comparison '" + spec.name + "'");
        const MetricDelta& d = m == 0 ? it->log_loss : m == 1 ? it->brier : it->ece;
        t.deltas.push_back(d.delta);
        t.runs_better += d.ci.high < 0;
        t.runs_worse += d.ci.low > 0;
      }
      double s = 0.0;
      for (double d : t.deltas) s += d;
      t.mean_delta = s / static_cast<double>(t.deltas.size());
      if (std::any_of(t.deltas.begin(), t.deltas.end(), [](double d) { return d != 0.0; })) {
        t.p_wilcoxon = wilcoxon_signed_rank(t.deltas).p;
        t.p_sign = sign_test(t.deltas).p;
      }
      const auto& dl = t.deltas;
      t.ci = percentile_bootstrap(
                 dl.size(),
                 [&](const std::vector<std::size_t>& idx) {
                   double acc = 0.0;
                   for (auto i : idx) acc += dl[i];
                   return acc / static_cast<double>(idx.size());
                 },
                 draws, derive_seed(seed, out.size()))
                 .ci;
      out.push_back(std::move(t));
    }
  }
  std::vector<double> p;
  for (const auto& t : out) p.push_back(t.p_wilcoxon);
  const auto holm = holm_adjust(p);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].p_holm = holm[i];
    out[i].verdict = probe_verdict(out[i].mean_delta, out[i].p_holm, alpha);
  }
  return out;
}

}  // namespace arcal
