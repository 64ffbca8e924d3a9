// Probe scoring and comparison (audit/probe_compare.hpp): fold-mean scores agree with the metric
// functions, the paired bootstrap is exact for identical probes and detects a known better probe,
// the across-run tests reproduce the paired-test functions with Holm, and bad input throws.
#include <gtest/gtest.h>

#include <cmath>

#include "audit/condcal.hpp"
#include "audit/probe_compare.hpp"
#include "calib/metrics.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "stats/multiplicity.hpp"
#include "stats/paired_tests.hpp"

using namespace arcal;

namespace {

struct Toy {
  std::vector<double> truth, correct;
  std::vector<int> fold;
};

Toy toy(std::size_t n, std::uint64_t seed) {
  Toy t;
  Rng rng(seed);
  for (std::size_t i = 0; i < n; ++i) {
    const double p = 0.2 + 0.75 * rng.uniform();
    t.truth.push_back(p);
    t.correct.push_back(rng.bernoulli(p) ? 1.0 : 0.0);
    t.fold.push_back(static_cast<int>(i % 2));
  }
  return t;
}

ProbeFit fit_of(const std::string& name, std::vector<double> q) {
  ProbeFit f;
  f.name = name;
  f.prediction = std::move(q);
  return f;
}

}  // namespace

TEST(ProbeCompare, ScoresAreFoldMeansOfTheMetricFunctions) {
  const auto t = toy(999, 1);  // unequal folds (500 / 499): fold mean differs from the pooled mean
  const auto s = score_probe(t.truth, t.correct, t.fold);
  double ll = 0, br = 0, ece = 0;
  for (int f = 0; f < 2; ++f) {
    std::vector<double> q, a;
    for (std::size_t i = 0; i < t.truth.size(); ++i)
      if (t.fold[i] == f) {
        q.push_back(t.truth[i]);
        a.push_back(t.correct[i]);
      }
    ll += 0.5 * binary_log_loss(q, a);
    br += 0.5 * binary_brier(q, a);
    ece += 0.5 * binary_ece(q, a, 15);
  }
  // Same sums in a different order: agreement to rounding.
  EXPECT_NEAR(s.log_loss, ll, 1e-12);
  EXPECT_NEAR(s.brier, br, 1e-12);
  EXPECT_NEAR(s.ece, ece, 1e-12);
}

TEST(ProbeCompare, IdenticalProbesGiveZeroDeltaAndDegenerateInterval) {
  const auto t = toy(400, 2);
  const auto a = fit_of("a", t.truth), b = fit_of("b", t.truth);
  const auto c = compare_probes(a, b, "a_vs_b", t.correct, t.fold, 200, 7);
  for (const MetricDelta* d : {&c.log_loss, &c.brier, &c.ece}) {
    EXPECT_EQ(d->delta, 0.0);
    EXPECT_EQ(d->ci.low, 0.0);
    EXPECT_EQ(d->ci.high, 0.0);
  }
}

TEST(ProbeCompare, TrueProbabilityBeatsConstantWithIntervalBelowZero) {
  const auto t = toy(4000, 3);
  double base = 0;
  for (double v : t.correct) base += v / 4000.0;
  const auto good = fit_of("truth", t.truth), flat = fit_of("constant", std::vector<double>(4000, base));
  const auto c = compare_probes(good, flat, "truth_vs_constant", t.correct, t.fold, 500, 11);
  const auto sg = score_probe(good.prediction, t.correct, t.fold), sf = score_probe(flat.prediction, t.correct, t.fold);
  EXPECT_NEAR(c.log_loss.delta, sg.log_loss - sf.log_loss, 1e-12);
  EXPECT_NEAR(c.brier.delta, sg.brier - sf.brier, 1e-12);
  EXPECT_LT(c.log_loss.ci.high, 0.0);
  EXPECT_LT(c.brier.ci.high, 0.0);
  EXPECT_LE(c.log_loss.ci.low, c.log_loss.delta);
  EXPECT_GE(c.log_loss.ci.high, c.log_loss.delta);
  const auto again = compare_probes(good, flat, "truth_vs_constant", t.correct, t.fold, 500, 11);
  EXPECT_EQ(again.log_loss.ci.low, c.log_loss.ci.low);  // seeded
  const auto other = compare_probes(good, flat, "truth_vs_constant", t.correct, t.fold, 500, 12);
  EXPECT_NE(other.log_loss.ci.low, c.log_loss.ci.low);
}

TEST(ProbeCompare, AcrossRunTestsMatchPairedTestsAndHolm) {
  const std::vector<double> d_ll{-0.010, -0.004, -0.007, -0.012, 0.001, -0.009};
  std::vector<RunProbeResult> runs(d_ll.size());
  for (std::size_t r = 0; r < runs.size(); ++r) {
    runs[r].run = "run" + std::to_string(r);
    for (const auto& spec : kProbeComparisons) {
      RunComparison c;
      c.name = spec.name;
      c.log_loss.delta = d_ll[r];
      c.log_loss.ci = {d_ll[r] - 0.003, d_ll[r] + 0.003};
      c.brier.delta = 0.0;  // all-zero column: p = 1 by convention
      c.ece.delta = 0.001 * double(r + 1);
      c.ece.ci = {-1, 1};
      runs[r].comparisons.push_back(c);
    }
  }
  const auto tests = across_run_probe_tests(runs, 500, 3, 0.05);
  ASSERT_EQ(tests.size(), kProbeComparisons.size() * kProbeMetrics.size());
  std::vector<double> p;
  for (const auto& t : tests) p.push_back(t.p_wilcoxon);
  const auto holm = holm_adjust(p);
  for (std::size_t i = 0; i < tests.size(); ++i) EXPECT_DOUBLE_EQ(tests[i].p_holm, holm[i]);
  const auto& ll = tests[0];
  EXPECT_EQ(ll.metric, "log_loss");
  EXPECT_NEAR(ll.mean_delta, -0.041 / 6.0, 1e-15);
  EXPECT_DOUBLE_EQ(ll.p_wilcoxon, wilcoxon_signed_rank(d_ll).p);
  EXPECT_DOUBLE_EQ(ll.p_sign, sign_test(d_ll).p);
  EXPECT_EQ(ll.runs_better, 5u);  // every run but the +0.001 one has delta + 0.003 < 0
  EXPECT_EQ(ll.runs_worse, 0u);
  EXPECT_LT(ll.ci.low, ll.mean_delta);
  EXPECT_GT(ll.ci.high, ll.mean_delta);
  EXPECT_EQ(tests[1].p_wilcoxon, 1.0);
  EXPECT_EQ(tests[1].verdict, "no detected difference");
  // Wilcoxon exact minimum for 6 runs is 2/64 = 0.031; Holm over 18 makes it 0.5625: no gain declared.
  EXPECT_EQ(ll.verdict, "no detected difference");
  EXPECT_EQ(probe_verdict(-0.01, 0.01, 0.05), "gain");
  EXPECT_EQ(probe_verdict(0.01, 0.01, 0.05), "loss");
}

TEST(ProbeCompare, RejectsBadInput) {
  auto t = toy(50, 4);
  auto a = fit_of("a", t.truth), b = fit_of("b", t.truth);
  std::vector<int> one_fold(50, 0);
  EXPECT_THROW(score_probe(t.truth, t.correct, one_fold), InputError);
  auto bad = t.truth;
  bad[3] = 1.5;
  EXPECT_THROW(score_probe(bad, t.correct, t.fold), InputError);
  t.correct[5] = 0.5;
  EXPECT_THROW(compare_probes(a, b, "x", t.correct, t.fold, 10, 0), InputError);
  EXPECT_THROW(across_run_probe_tests({}, 10, 0, 0.05), InputError);
  std::vector<RunProbeResult> runs(1);
  EXPECT_THROW(across_run_probe_tests(runs, 10, 0, 0.05), InputError);  // lacks every comparison
}
