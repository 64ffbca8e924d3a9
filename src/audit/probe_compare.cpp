#include "audit/probe_compare.hpp"

#include <algorithm>
#include <cmath>

#include "audit/condcal.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "stats/meta_analysis.hpp"
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

double metric_of(const ProbeScores& s, std::size_t m) { return m == 0 ? s.log_loss : m == 1 ? s.brier : s.ece; }

}  // namespace

ProbeScores score_probe(const std::vector<double>& q, const std::vector<double>& a, const std::vector<int>& fold,
                        std::size_t ece_bins) {
  check_inputs("score_probe", q, a, fold);
  return weighted_scores(q, a, terms(q, a, ece_bins), fold, std::vector<double>(q.size(), 1.0), ece_bins);
}

ProbeScores score_half(const std::vector<double>& q, const std::vector<double>& a, std::size_t ece_bins) {
  const char* fn = "score_half";
  check_same_size(fn, "estimate", q.size(), "correct", a.size());
  if (q.empty()) throw_input(fn, "no evaluation example");
  ProbeScores s;
  for (std::size_t i = 0; i < q.size(); ++i) {
    check_probability(fn, "estimate", i, q[i]);
    if (a[i] != 0.0 && a[i] != 1.0) throw_index(fn, "correct", i, std::to_string(a[i]), "0 or 1");
    s.log_loss += example_log_loss(q[i], a[i]);
    s.brier += (q[i] - a[i]) * (q[i] - a[i]);
  }
  s.log_loss /= double(q.size());
  s.brier /= double(q.size());
  s.ece = binary_ece(q, a, ece_bins);
  return s;
}

MetricDelta split_delta(const std::vector<double>& probe, const std::vector<double>& control, double ratio,
                        double level) {
  const char* fn = "split_delta";
  check_same_size(fn, "control", control.size(), "probe", probe.size());
  if (probe.empty()) throw_input(fn, "no splits");
  if (!(level > 0 && level < 1)) throw_input(fn, "level is " + std::to_string(level) + ", but must be in (0, 1)");
  if (!(ratio >= 0) || !std::isfinite(ratio)) throw_input(fn, "test_train_ratio must be finite and >= 0");
  MetricDelta d;
  const std::size_t m = probe.size();
  for (std::size_t s = 0; s < m; ++s) {
    check_finite(fn, "probe", s, probe[s]);
    check_finite(fn, "control", s, control[s]);
    d.split_deltas.push_back(probe[s] - control[s]);
    d.delta += d.split_deltas.back() / double(m);
  }
  double ss = 0;
  for (double x : d.split_deltas) ss += (x - d.delta) * (x - d.delta);
  const double s2 = m > 1 ? ss / double(m - 1) : 0.0;
  d.se = std::sqrt((1.0 / double(m) + ratio) * s2);
  if (!(d.se > 0)) {
    d.ci = {d.delta, d.delta};
    d.p = d.delta == 0.0 ? 1.0 : 0.0;
    return d;
  }
  const double df = double(m - 1), t = student_t_quantile(0.5 + level / 2, df);
  d.ci = {d.delta - t * d.se, d.delta + t * d.se};
  d.p = std::min(1.0, 2.0 * student_t_cdf(-std::abs(d.delta / d.se), df));
  return d;
}

RunComparison compare_probes(const ProbeFit& probe, const ProbeFit& control, const std::string& name, double ratio,
                             double level) {
  const char* fn = "compare_probes";
  if (probe.split_scores.empty() || probe.split_scores.size() != control.split_scores.size())
    throw_input(fn, "probe '" + probe.name + "' has " + std::to_string(probe.split_scores.size()) +
                        " split scores and control '" + control.name + "' " +
                        std::to_string(control.split_scores.size()) + "; both need the same number (>= 1)");
  RunComparison out;
  out.name = name;
  out.probe = probe.name;
  out.control = control.name;
  std::array<MetricDelta*, 3> dst{&out.log_loss, &out.brier, &out.ece};
  for (std::size_t m = 0; m < 3; ++m) {
    std::vector<double> a, b;
    for (std::size_t s = 0; s < probe.split_scores.size(); ++s) {
      a.push_back(metric_of(probe.split_scores[s], m));
      b.push_back(metric_of(control.split_scores[s], m));
    }
    *dst[m] = split_delta(a, b, ratio, level);
  }
  return out;
}

std::string probe_verdict(double mean_delta, double p_holm, double alpha) {
  if (p_holm < alpha && mean_delta < 0) return "gain";
  if (p_holm < alpha && mean_delta > 0) return "loss";
  return "no detected difference";
}

std::vector<AcrossRunTest> across_run_probe_tests(const std::vector<RunProbeResult>& runs, double alpha) {
  const char* fn = "across_run_probe_tests";
  if (runs.empty()) throw_input(fn, "no runs; the across-run tests need at least one");
  std::vector<AcrossRunTest> out;
  for (const auto& spec : kProbeComparisons) {
    for (std::size_t m = 0; m < kProbeMetrics.size(); ++m) {
      AcrossRunTest t;
      t.comparison = spec.name;
      t.metric = kProbeMetrics[m];
      const MetricDelta* only = nullptr;
      for (std::size_t r = 0; r < runs.size(); ++r) {
        const auto& cs = runs[r].comparisons;
        auto it = std::find_if(cs.begin(), cs.end(), [&](const RunComparison& c) { return c.name == spec.name; });
        if (it == cs.end())
          throw_input(fn, "runs[" + std::to_string(r) + "] '" + runs[r].run + "' lacks comparison '" + spec.name + "'");
        const MetricDelta& d = m == 0 ? it->log_loss : m == 1 ? it->brier : it->ece;
        only = &d;
        t.deltas.push_back(d.delta);
        t.variances.push_back(d.se * d.se);
        t.runs_better += d.ci.high < 0;
        t.runs_worse += d.ci.low > 0;
      }
      for (double d : t.deltas) t.plain_mean += d / double(t.deltas.size());
      const std::size_t k = t.deltas.size();
      std::size_t nonzero = 0;
      for (double d : t.deltas) nonzero += d != 0.0;
      t.p_rank_min = smallest_rank_test_p(nonzero);
      if (nonzero > 0) {
        t.p_wilcoxon = wilcoxon_signed_rank(t.deltas).p;
        t.p_sign = sign_test(t.deltas).p;
      }
      double se = 0, df = 0;
      if (k >= 2) {
        const auto re = hartung_knapp(t.deltas, t.variances);
        t.mean_delta = re.mean;
        t.ci = {re.low, re.high};
        t.p = re.p;
        t.tau2 = re.tau2;
        se = re.se;
        df = re.df;
      } else {
        t.mean_delta = only->delta;
        t.ci = only->ci;
        t.p = only->p;
        se = only->se;
        df = double(only->split_deltas.size()) - 1.0;
      }
      if (se > 0 && df > 0) t.detectable = (student_t_quantile(1 - alpha / 2, df) + student_t_quantile(0.8, df)) * se;
      char buf[320];
      if (k == 1) {
        std::snprintf(buf, sizeof buf,
                      "one run: its own split test only; no statement across seeds. With this spread a |delta| of "
                      "%.2g would be detected with 80%% power",
                      t.detectable);
        t.power_note = buf;
      } else if (t.p_rank_min >= alpha) {
        std::snprintf(buf, sizeof buf,
                      "with %zu runs the rank tests cannot reach p < %g (smallest attainable p %.3g); the "
                      "random-effects test decides, and detects a |delta| of about %.2g with 80%% power",
                      k, alpha, t.p_rank_min, t.detectable);
        t.power_note = buf;
      } else {
        std::snprintf(buf, sizeof buf, "the random-effects test detects a |delta| of about %.2g with 80%% power",
                      t.detectable);
        t.power_note = buf;
      }
      out.push_back(std::move(t));
    }
  }
  std::vector<double> p;
  for (const auto& t : out) p.push_back(t.p);
  const auto holm = holm_adjust(p);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].p_holm = holm[i];
    out[i].verdict = probe_verdict(out[i].mean_delta, out[i].p_holm, alpha);
  }
  return out;
}

}  // namespace arcal
