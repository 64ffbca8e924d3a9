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
#include "audit/torch/sensitivity_audit.hpp"
#include "core/error.hpp"

using namespace arcal;

namespace {

bool long_tests() {
  const char* v = std::getenv("ARCAL_LONG_TESTS");
  return v && std::string(v) == "1";
}

AuditRunInput simulated_run(std::size_t n, double effect, std::uint64_t seed) {
  SimulationOptions so;
  so.n = n;
  so.effect_nats = effect;
  so.seed = seed;
  return make_audit_run_input(simulate_trace(so).trace, "sim" + std::to_string(seed), {"re"});
}

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
