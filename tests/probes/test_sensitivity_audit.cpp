// The sensitivity and exact-null audits (audit/torch/sensitivity_audit.hpp) on simulated traces: the
// oracle probe recovers R = 1, with no injected effect no probe's gain interval lies above 0, the 2-D
// NW probe's recovery rises with the effect, exact-null p-values of null runs are not small while an
// injected effect gets the smallest attainable p, and bad input throws. ARCAL_LONG_TESTS=1 runs the
// full-size timing (3 runs x N = 10,000, default settings).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>

#include "audit/run_input.hpp"
#include "audit/simulate.hpp"
#include "../audit/audit_test_util.hpp"
#include "audit/torch/sensitivity_audit.hpp"
#include "core/error.hpp"

using namespace arcal;
using arcal::test_util::long_tests;
using arcal::test_util::simulated_run;

namespace {

const RecoveryEstimate& estimate(const SensitivityEffect& e, const std::string& probe) {
  for (const auto& p : e.probes)
    if (p.probe == probe) return p;
  throw std::runtime_error("missing probe " + probe);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(Sensitivity, OracleRecoversAllNullCoversZeroNwRises) {
  torch::set_num_threads(1);
  std::vector<AuditRunInput> runs{simulated_run(2000, 0.0, 11), simulated_run(2000, 0.0, 12)};
  SensitivityAuditOptions o;
  o.effects = {0.0, 0.01, 0.04};
  o.threshold_effect = 0.01;
  o.draws = 4;
  o.probes.seed = 5;
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = run_sensitivity_audit(runs, o);
  std::printf("  sensitivity, 2 runs x N = 2000, 3 effects x 4 draws: %.1f s\n", seconds_since(t0));
  ASSERT_EQ(res.by_effect.size(), 3u);
  for (const auto& e : res.by_effect)
    for (const auto& p : e.probes)
      std::printf("    effect %.3f %-22s gain %+.5f [%+.5f, %+.5f]  R %.3f [%.3f, %.3f]  epochs %.1f\n", e.effect_nats,
                  p.probe.c_str(), p.gain, p.gain_ci.low, p.gain_ci.high, p.recovery, p.recovery_ci.low,
                  p.recovery_ci.high, p.mean_epochs);
  // Δ = 0: R undefined, and no probe beats the reference beyond its interval (the reference is the
  // truth, so every gain is estimation noise or a loss).
  for (const auto& p : res.by_effect[0].probes) {
    EXPECT_FALSE(p.has_recovery) << p.probe;
    if (p.probe != "oracle") {
      EXPECT_LE(p.gain_ci.low, 0.0) << p.probe;
    }
  }
  // The oracle is p* itself: R = 1 by construction (ratio of the same sums), up to rounding.
  for (std::size_t e = 1; e < 3; ++e) {
    const auto& oracle = estimate(res.by_effect[e], "oracle");
    EXPECT_NEAR(oracle.recovery, 1.0, 1e-12);
    EXPECT_NEAR(oracle.recovery_ci.low, 1.0, 1e-12);
  }
  // Recovery rises with the effect for the NW probe: its estimation cost is fixed while the signal grows.
  EXPECT_GT(estimate(res.by_effect[2], "nw_2d").recovery, estimate(res.by_effect[1], "nw_2d").recovery);
  // Every run and fold reached the requested oracle gain (exact expected KL) to 1e-6 nats.
  for (std::size_t e = 1; e < 3; ++e)
    for (double g : res.by_effect[e].oracle_gain) EXPECT_NEAR(g, res.by_effect[e].effect_nats, 1e-6);
  EXPECT_EQ(res.verdicts.size(), res.by_effect[1].probes.size() - 1);
}

TEST(ExactNull, NullRunsGetLargePInjectedEffectGetsSmallest) {
  torch::set_num_threads(1);
  // Six null runs and one with a strong injected effect; only the full-vector probe and its
  // capacity-matched control (one comparison) to keep the cost down.
  std::vector<AuditRunInput> runs;
  for (std::uint64_t s = 0; s < 6; ++s) runs.push_back(simulated_run(1500, 0.0, 40 + s));
  ExactNullAuditOptions o;
  o.probes.only = {"full_vector", "capacity_matched"};
  o.probes.seed = 3;
  o.replicates = 19;
  o.variants = {"confidence"};
  const auto t0 = std::chrono::steady_clock::now();
  const auto null_res = run_exact_null_audit(runs, o);
  const auto effect_res = run_exact_null_audit({simulated_run(1500, 0.05, 77)}, o);
  std::printf("  exact null, 7 runs x N = 1500, 19 replicates: %.1f s\n", seconds_since(t0));
  ASSERT_EQ(null_res.runs.size(), 6u);
  std::size_t small = 0;
  double sum_p = 0;
  for (const auto& r : null_res.runs) {
    ASSERT_EQ(r.comparisons.size(), 1u);
    const auto& c = r.comparisons[0];
    EXPECT_EQ(c.null_gain.size(), 19u);
    std::printf("    null run %s: real gain %+.5f, null mean %+.5f q95 %+.5f, p %.2f\n", r.run.c_str(), c.real_gain,
                c.null_mean, c.null_q95, c.p);
    small += c.p <= 0.05 + 1e-12;
    sum_p += c.p;
  }
  // Under the null each p is uniform on {1/20, ..., 1}: P(p = 0.05) = 0.05, so >= 2 of 6 such p happen
  // with probability 0.033; the mean of 6 uniform p (sd 0.12) below 0.2 has probability < 0.01.
  EXPECT_LE(small, 1u);
  EXPECT_GT(sum_p / 6.0, 0.2);
  const auto& c = effect_res.runs[0].comparisons[0];
  std::printf("    effect 0.05: real gain %+.5f, null q95 %+.5f, p %.3f\n", c.real_gain, c.null_q95, c.p);
  EXPECT_DOUBLE_EQ(c.p, 1.0 / 20.0);
  ASSERT_EQ(null_res.pooled.size(), 1u);
  EXPECT_EQ(null_res.pooled[0].runs, 6u);
}

TEST(SensitivityAudit, RejectsBadInput) {
  std::vector<AuditRunInput> runs{simulated_run(400, 0.0, 1)};
  SensitivityAuditOptions s;
  s.draws = 0;
  EXPECT_THROW(run_sensitivity_audit(runs, s), InputError);
  s.draws = 1;
  s.effects = {0.01, -0.1};
  EXPECT_THROW(run_sensitivity_audit(runs, s), InputError);
  s.effects = {0.002, 0.005};
  EXPECT_THROW(run_sensitivity_audit(runs, s), InputError);  // threshold effect 0.01 not among them
  s.effects = {0.01};
  s.statistic = 3;
  EXPECT_THROW(run_sensitivity_audit(runs, s), InputError);
  ExactNullAuditOptions x;
  x.replicates = 0;
  EXPECT_THROW(run_exact_null_audit(runs, x), InputError);
  x.replicates = 1;
  x.variants = {"oracle"};
  EXPECT_THROW(run_exact_null_audit(runs, x), InputError);
  x.variants = {"full_logit"};
  x.probes.only = {"full_vector", "capacity_matched"};
  EXPECT_THROW(run_exact_null_audit(runs, x), InputError);
  EXPECT_THROW(run_exact_null_audit({}, x), InputError);
}

TEST(SensitivityAudit, LongFullSizeTiming) {
  if (!long_tests()) GTEST_SKIP() << "set ARCAL_LONG_TESTS=1 (ctest -L long)";
  torch::set_num_threads(1);
  std::vector<AuditRunInput> runs;
  for (std::uint64_t s = 1; s <= 3; ++s) runs.push_back(simulated_run(10000, 0.0, s));
  SensitivityAuditOptions o;
  auto t0 = std::chrono::steady_clock::now();
  const auto res = run_sensitivity_audit(runs, o);
  std::printf("  sensitivity, 3 runs x N = 10,000, defaults: %.1f s\n", seconds_since(t0));
  for (const auto& v : res.verdicts) std::printf("    R(0.010) %-22s %+.3f: %s\n", v.probe.c_str(), v.recovery, v.verdict.c_str());
  for (std::size_t e = 1; e < res.by_effect.size(); ++e)
    EXPECT_GE(estimate(res.by_effect[e], "nw_2d").recovery, estimate(res.by_effect[e - 1], "nw_2d").recovery);
  ExactNullAuditOptions x;
  t0 = std::chrono::steady_clock::now();
  const auto xr = run_exact_null_audit(runs, x);
  std::printf("  exact null, 3 runs x N = 10,000, defaults: %.1f s\n", seconds_since(t0));
  for (const auto& p : xr.pooled) {
    std::printf("    %-10s %-40s real %+.5f null q95 %+.5f p %.3f\n", p.variant.c_str(), p.comparison.c_str(),
                p.real_mean_gain, p.null_q95, p.p);
    EXPECT_GT(p.p, 0.001);  // null data: no pooled p at the floor 1/201
  }
}
