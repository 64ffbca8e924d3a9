// Probe scoring and comparison (audit/probe_compare.hpp): fold-mean and half scores agree with the
// metric functions, the per-run split test is the Nadeau-Bengio corrected t-test computed by hand, the
// across-run test is the Hartung-Knapp meta-analysis with Holm and says what few runs cannot detect,
// and bad input throws.
#include <gtest/gtest.h>

#include <cmath>

#include "audit/condcal.hpp"
#include "audit/probe_compare.hpp"
#include "calib/metrics.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "stats/meta_analysis.hpp"
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

TEST(ProbeCompare, HalfScoresAreTheMetricFunctions) {
  const auto t = toy(777, 8);
  const auto s = score_half(t.truth, t.correct);
  EXPECT_NEAR(s.log_loss, binary_log_loss(t.truth, t.correct), 1e-12);
  EXPECT_NEAR(s.brier, binary_brier(t.truth, t.correct), 1e-12);
  EXPECT_NEAR(s.ece, binary_ece(t.truth, t.correct, 15), 1e-12);
}

TEST(ProbeCompare, SplitDeltaIsTheNadeauBengioCorrectedTTest) {
  // Ten split-level deltas by hand: mean, S² with n - 1, se = sqrt((1/10 + 1) S²), t_9 interval.
  const std::vector<double> probe{0.50, 0.52, 0.49, 0.51, 0.50, 0.48, 0.53, 0.50, 0.49, 0.51};
  std::vector<double> control(probe.size());
  for (std::size_t s = 0; s < probe.size(); ++s) control[s] = probe[s] + 0.01 - 0.002 * double(s % 3);
  double mean = 0;
  for (std::size_t s = 0; s < probe.size(); ++s) mean += (probe[s] - control[s]) / 10;
  double ss = 0;
  for (std::size_t s = 0; s < probe.size(); ++s) ss += std::pow(probe[s] - control[s] - mean, 2);
  const double se = std::sqrt((0.1 + 1.0) * ss / 9);
  const auto d = split_delta(probe, control, 1.0);
  EXPECT_NEAR(d.delta, mean, 1e-15);
  EXPECT_NEAR(d.se, se, 1e-15);
  EXPECT_NEAR(d.ci.low, mean - 2.262157163 * se, 1e-8);
  EXPECT_NEAR(d.p, 2 * student_t_cdf(-std::abs(mean / se), 9), 1e-12);
  EXPECT_LT(d.ci.high, 0.0);
  // Identical probes: zero delta, degenerate interval, p = 1.
  const auto z = split_delta(probe, probe, 1.0);
  EXPECT_EQ(z.delta, 0.0);
  EXPECT_EQ(z.ci.low, 0.0);
  EXPECT_EQ(z.p, 1.0);
  // Without the correction (ratio 0) and iid split deltas the t-interval covers a zero mean at 95 %.
  Rng rng(6);
  std::size_t covered = 0;
  for (int rep = 0; rep < 2000; ++rep) {
    std::vector<double> a(10), b(10, 0.0);
    for (auto& x : a) x = 0.01 * rng.normal();
    const auto m = split_delta(a, b, 0.0);
    covered += m.ci.low <= 0 && 0 <= m.ci.high;
  }
  EXPECT_NEAR(covered / 2000.0, 0.95, 0.015);
}

TEST(ProbeCompare, ComparisonOfFitsUsesTheirSplitScores) {
  ProbeFit a, b;
  a.name = "a";
  b.name = "b";
  for (int s = 0; s < 4; ++s) {
    a.split_scores.push_back({0.40 + 0.01 * s, 0.20, 0.05});
    b.split_scores.push_back({0.42 + 0.01 * s + 0.001 * (s % 2), 0.21, 0.05});
  }
  const auto c = compare_probes(a, b, "a_vs_b", 1.0);
  EXPECT_NEAR(c.log_loss.delta, -0.0205, 1e-12);
  EXPECT_NEAR(c.brier.delta, -0.01, 1e-12);
  EXPECT_EQ(c.ece.delta, 0.0);
  EXPECT_EQ(c.log_loss.split_deltas.size(), 4u);
  ProbeFit empty;
  EXPECT_THROW(compare_probes(a, empty, "x", 1.0), InputError);
}

namespace {
std::vector<RunProbeResult> runs_with(const std::vector<double>& d_ll, double se) {
  std::vector<RunProbeResult> runs(d_ll.size());
  for (std::size_t r = 0; r < runs.size(); ++r) {
    runs[r].run = "run" + std::to_string(r);
    for (const auto& spec : kProbeComparisons) {
      RunComparison c;
      c.name = spec.name;
      c.log_loss.delta = d_ll[r];
      c.log_loss.se = se;
      c.log_loss.ci = {d_ll[r] - 2.26 * se, d_ll[r] + 2.26 * se};
      c.log_loss.p = 0.5;
      c.log_loss.split_deltas.assign(10, d_ll[r]);
      c.brier.delta = 0.0;  // all-zero column: p = 1 by convention
      c.brier.split_deltas.assign(10, 0.0);
      c.ece.delta = 0.001 * double(r + 1);
      c.ece.se = 0.01;
      c.ece.ci = {-1, 1};
      c.ece.split_deltas.assign(10, 0.0);
      runs[r].comparisons.push_back(c);
    }
  }
  return runs;
}
}  // namespace

TEST(ProbeCompare, AcrossRunTestIsRandomEffectsWithHolm) {
  const std::vector<double> d_ll{-0.010, -0.008, -0.009, -0.011, -0.002, -0.009};
  const auto tests = across_run_probe_tests(runs_with(d_ll, 0.0013), 0.05);
  ASSERT_EQ(tests.size(), kProbeComparisons.size() * kProbeMetrics.size());
  std::vector<double> p;
  for (const auto& t : tests) p.push_back(t.p);
  const auto holm = holm_adjust(p);
  for (std::size_t i = 0; i < tests.size(); ++i) EXPECT_DOUBLE_EQ(tests[i].p_holm, holm[i]);
  const auto& ll = tests[0];
  const auto re = hartung_knapp(d_ll, std::vector<double>(6, 0.0013 * 0.0013));
  EXPECT_EQ(ll.metric, "log_loss");
  EXPECT_NEAR(ll.mean_delta, re.mean, 1e-15);
  EXPECT_NEAR(ll.plain_mean, -0.049 / 6.0, 1e-15);
  EXPECT_DOUBLE_EQ(ll.p, re.p);
  EXPECT_DOUBLE_EQ(ll.ci.low, re.low);
  EXPECT_DOUBLE_EQ(ll.p_wilcoxon, wilcoxon_signed_rank(d_ll).p);
  EXPECT_DOUBLE_EQ(ll.p_sign, sign_test(d_ll).p);
  EXPECT_DOUBLE_EQ(ll.p_rank_min, 2.0 / 64);
  EXPECT_EQ(ll.runs_better, 5u);  // every run but the -0.002 one has its interval (± 2.26 · 0.0013) below 0
  EXPECT_EQ(ll.runs_worse, 0u);
  EXPECT_EQ(tests[1].p, 1.0);
  EXPECT_EQ(tests[1].verdict, "no detected difference");
  // The random-effects test rejects after Holm over the 18 tests where the rank tests cannot
  // (the exact Wilcoxon minimum for 6 runs, 2/64, times 18 is above 0.05).
  EXPECT_LT(ll.p_holm, 0.05);
  EXPECT_EQ(ll.verdict, "gain");
  EXPECT_GT(holm_adjust(std::vector<double>(18, ll.p_wilcoxon))[0], 0.05);
  EXPECT_EQ(probe_verdict(-0.01, 0.01, 0.05), "gain");
  EXPECT_EQ(probe_verdict(0.01, 0.01, 0.05), "loss");
  EXPECT_EQ(probe_verdict(-0.01, 0.05, 0.05), "no detected difference");  // p_holm must be < alpha
}

TEST(ProbeCompare, ThreeRunsSayWhatTheRankTestsCannotReach) {
  const auto tests = across_run_probe_tests(runs_with({-0.001, 0.0005, -0.0002}, 0.001), 0.05);
  EXPECT_DOUBLE_EQ(tests[0].p_rank_min, 0.25);
  EXPECT_NE(tests[0].power_note.find("smallest attainable p 0.25"), std::string::npos) << tests[0].power_note;
  EXPECT_EQ(tests[0].verdict, "no detected difference");
  const auto one = across_run_probe_tests(runs_with({-0.003}, 0.001), 0.05);
  EXPECT_NE(one[0].power_note.find("one run"), std::string::npos);
  EXPECT_EQ(one[0].p, 0.5);  // the run's own split test
}

TEST(ProbeCompare, RejectsBadInput) {
  auto t = toy(50, 4);
  std::vector<int> one_fold(50, 0);
  EXPECT_THROW(score_probe(t.truth, t.correct, one_fold), InputError);
  auto bad = t.truth;
  bad[3] = 1.5;
  EXPECT_THROW(score_probe(bad, t.correct, t.fold), InputError);
  EXPECT_THROW(score_half(bad, t.correct), InputError);
  EXPECT_THROW(split_delta({0.1, 0.2}, {0.1}, 1.0), InputError);
  EXPECT_THROW(across_run_probe_tests({}, 0.05), InputError);
  std::vector<RunProbeResult> runs(1);
  EXPECT_THROW(across_run_probe_tests(runs, 0.05), InputError);  // lacks every comparison
}
