// The standard-library pieces of the sensitivity and exact-null audits (audit/sensitivity.hpp): the
// injection bisection reaches the requested oracle gain on an NW reference, the correction probe
// recovers a known g and leaves q alone without signal, the recovery summary gives the oracle R = 1,
// the Monte-Carlo p is uniform under exchangeability, and invalid input throws.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "audit/injection.hpp"
#include "audit/sensitivity.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

using namespace arcal;

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Toy {
  std::vector<double> c, a, z;
};
Toy toy(std::size_t n, std::uint64_t seed) {
  Rng rng(seed);
  Toy t;
  for (std::size_t i = 0; i < n; ++i) {
    const double c = 0.5 + 0.5 * rng.uniform();
    t.c.push_back(c);
    t.a.push_back(rng.uniform() < c ? 1.0 : 0.0);
    t.z.push_back(rng.normal());
  }
  return t;
}
}  // namespace

TEST(Sensitivity, BisectionHitsOracleGainOnNwReference) {
  const auto t = toy(3000, 1);
  std::vector<std::size_t> fit;
  for (std::size_t i = 0; i < 3000; i += 2) fit.push_back(i);
  const auto q = nw_confidence_reference(t.c, t.a, fit);
  ASSERT_EQ(q.size(), 3000u);
  auto tz = standardise(t.z, "test", "z");
  for (auto& v : tz) v = std::tanh(v);
  for (double nats : {0.002, 0.005, 0.010, 0.020}) {
    const double delta = solve_injection_delta(q, tz, nats);
    EXPECT_NEAR(injection_gain(q, tz, delta), nats, 1e-6) << nats;
    EXPECT_GT(delta, 0.0);
  }
  EXPECT_EQ(solve_injection_delta(q, tz, 0.0), 0.0);
}

TEST(Sensitivity, CorrectionProbeRecoversKnownShiftAndShrinksWithoutSignal) {
  Rng rng(3);
  const std::size_t n = 40000;
  std::vector<double> q(n), z(n), y(n), y0(n);
  for (std::size_t i = 0; i < n; ++i) {
    q[i] = 0.2 + 0.6 * rng.uniform();
    z[i] = rng.normal();
    const double u = std::min(std::max(z[i], -3.0), 3.0) / 3.0;
    const double truth = sigmoid(std::log(q[i] / (1 - q[i])) + 0.9 * u);
    y[i] = rng.uniform() < truth ? 1.0 : 0.0;
    y0[i] = rng.uniform() < q[i] ? 1.0 : 0.0;
  }
  // g(z) = 0.9 u is in the basis: with 40,000 rows the slope's standard error is about 0.03.
  const auto cp = fit_correction_probe(q, z, y, 1.0);
  EXPECT_NEAR(cp.beta[1], 0.9, 0.15);
  EXPECT_NEAR(cp.beta[0], 0.0, 0.1);
  // No signal: every coefficient within a few standard errors of 0 and predictions near q.
  const auto c0 = fit_correction_probe(q, z, y0, 1.0);
  for (double b : c0.beta) EXPECT_LT(std::abs(b), 0.2);
  const auto p0 = apply_correction_probe(c0, q, z);
  double maxdiff = 0;
  for (std::size_t i = 0; i < n; ++i) maxdiff = std::max(maxdiff, std::abs(p0[i] - q[i]));
  EXPECT_LT(maxdiff, 0.08);
  // A huge ridge pins g to 0, so the probe returns q.
  const auto big = fit_correction_probe(q, z, y, 1e12);
  for (double b : big.beta) EXPECT_LT(std::abs(b), 1e-6);
}

TEST(Sensitivity, RidgeCrossValidationShrinksWithoutSignalAndNotWithStrongSignal) {
  // With no dependence on z the cross-validated log-loss is lowest where g is pinned near 0 (a large
  // ridge); with a strong one (g = 2u, well inside the basis) shrinkage costs likelihood, so a small
  // ridge wins. Over 10 seeds each, the medians must sit at opposite ends of the grid.
  std::vector<double> none, strong;
  for (std::uint64_t seed = 0; seed < 10; ++seed) {
    Rng rng(100 + seed);
    const std::size_t n = 2000;
    std::vector<double> q(n), z(n), y(n), y0(n);
    for (std::size_t i = 0; i < n; ++i) {
      q[i] = 0.2 + 0.6 * rng.uniform();
      z[i] = rng.normal();
      const double u = std::min(std::max(z[i], -3.0), 3.0) / 3.0;
      y[i] = rng.uniform() < sigmoid(std::log(q[i] / (1 - q[i])) + 2.0 * u) ? 1.0 : 0.0;
      y0[i] = rng.uniform() < q[i] ? 1.0 : 0.0;
    }
    none.push_back(choose_correction_ridge(q, z, y0, kCorrectionRidges, 5, seed));
    strong.push_back(choose_correction_ridge(q, z, y, kCorrectionRidges, 5, seed));
  }
  std::sort(none.begin(), none.end());
  std::sort(strong.begin(), strong.end());
  EXPECT_GE(none[5], 100.0);
  EXPECT_LE(strong[5], 1.0);
  EXPECT_THROW(choose_correction_ridge({0.5}, {0.0}, {1.0}, kCorrectionRidges, 5, 0), InputError);
}

TEST(Sensitivity, RecoverySummaryOracleIsOneAndZeroEffectHasNoRatio) {
  RecoveryUnits u;
  Rng rng(4);
  for (int i = 0; i < 30; ++i) {
    const double lq = 0.5 + 0.01 * rng.normal(), ls = lq - 0.01 + 0.002 * rng.normal();
    u.loss_reference.push_back(lq);
    u.loss_truth.push_back(ls);
  }
  u.loss_probe = {u.loss_truth, u.loss_reference, {}};
  for (int i = 0; i < 30; ++i)
    u.loss_probe[2].push_back(0.5 * (u.loss_reference[std::size_t(i)] + u.loss_truth[std::size_t(i)]));
  const auto r = summarise_recovery(u, {"oracle", "reference", "half"}, 0.01, 500, 7);
  EXPECT_NEAR(r[0].recovery, 1.0, 1e-12);
  EXPECT_NEAR(r[0].recovery_ci.low, 1.0, 1e-12);
  EXPECT_NEAR(r[0].recovery_ci.high, 1.0, 1e-12);
  EXPECT_NEAR(r[1].recovery, 0.0, 1e-12);
  EXPECT_NEAR(r[2].recovery, 0.5, 1e-12);
  EXPECT_LT(r[0].gain_ci.low, r[0].gain);
  EXPECT_GT(r[0].gain_ci.high, r[0].gain);
  const auto z = summarise_recovery(u, {"oracle", "reference", "half"}, 0.0, 100, 7);
  for (const auto& e : z) EXPECT_FALSE(e.has_recovery);
  EXPECT_THROW(summarise_recovery(u, {"only_one"}, 0.01, 100, 7), InputError);
  RecoveryUnits empty;
  EXPECT_THROW(summarise_recovery(empty, {}, 0.01, 100, 7), InputError);
}

TEST(Sensitivity, MonteCarloPIsUniformUnderExchangeability) {
  // Real and 19 null values i.i.d.: P(p <= k/20) = k/20 exactly. 4000 trials; 99 % band.
  Rng rng(9);
  const int trials = 4000;
  int small = 0, le_half = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> null(19);
    for (auto& v : null) v = rng.normal();
    const double p = monte_carlo_p(rng.normal(), null);
    small += p <= 0.05 + 1e-12;
    le_half += p <= 0.5 + 1e-12;
  }
  // Bin(4000, 0.05): sd 13.8 -> 99 % band ±36; Bin(4000, 0.5): sd 31.6 -> ±82.
  EXPECT_NEAR(small, 200, 36);
  EXPECT_NEAR(le_half, 2000, 82);
  EXPECT_DOUBLE_EQ(monte_carlo_p(10.0, {0, 1, 2}), 0.25);
  EXPECT_DOUBLE_EQ(monte_carlo_p(-10.0, {0, 1, 2}), 1.0);
  EXPECT_THROW(monte_carlo_p(0.0, {}), InputError);
}

TEST(Sensitivity, SequentialPIsValidAndKeepsTheDecisionsAtAlpha) {
  // Besag-Clifford with h = settling_count(0.05, 199) = 11: real and 199 null values i.i.d. (so the
  // fixed-count p is uniform on k/200). Under exchangeability P(p <= u) <= u for every u (checked at
  // 0.05, 0.2, 0.5 in a 99 % band above), the decision at 0.05 is that of the fixed-count p in every
  // trial, and the stopping point L is far below 199 on average (the saving it buys).
  Rng rng(10);
  const int trials = 4000;
  const std::size_t n = 199, h = settling_count(0.05, n);
  EXPECT_EQ(h, 11u);  // floor(0.05 * 200) + 1
  int le05 = 0, le20 = 0, le50 = 0, disagree = 0;
  double mean_drawn = 0;
  for (int t = 0; t < trials; ++t) {
    std::vector<double> null(n);
    for (auto& v : null) v = rng.normal();
    const double real = rng.normal();
    const double p = sequential_p(real, null, h), fixed = monte_carlo_p(real, null);
    le05 += p <= 0.05 + 1e-12;
    le20 += p <= 0.2 + 1e-12;
    le50 += p <= 0.5 + 1e-12;
    disagree += (p <= 0.05 + 1e-12) != (fixed <= 0.05 + 1e-12);
    std::size_t ge = 0, drawn = n;
    for (std::size_t j = 0; j < n; ++j)
      if (null[j] >= real - 1e-12 && ++ge == h) {
        drawn = j + 1;
        break;
      }
    mean_drawn += double(drawn) / trials;
    if (p < 1.0 && drawn < n) {
      EXPECT_DOUBLE_EQ(p, double(h) / double(drawn));
    }
  }
  std::printf(
      "  P(p<=.05) %.4f  P(p<=.2) %.4f  P(p<=.5) %.4f, decisions changed %d, mean replicates drawn %.1f of %zu\n",
      le05 / double(trials), le20 / double(trials), le50 / double(trials), disagree, mean_drawn, n);
  EXPECT_EQ(disagree, 0);
  EXPECT_LE(le05, 200 + 36);    // Bin(4000, 0.05) 99 % upper end
  EXPECT_LE(le20, 800 + 65);    // sd 25.3
  EXPECT_LE(le50, 2000 + 82);   // sd 31.6
  EXPECT_GE(le05, 200 - 36);    // the fixed test's decisions, so its rate
  EXPECT_LT(mean_drawn, 60.0);  // E[L] = sum over ranks ~ h (n+1)(H_{n+1} - H_h)/... : about 43
  // Closed forms: every null value above the real one stops at the h-th; h = 0 is monte_carlo_p.
  EXPECT_DOUBLE_EQ(sequential_p(0.0, std::vector<double>(50, 1.0), 11), 1.0);
  EXPECT_DOUBLE_EQ(sequential_p(0.0, {-1, 2, -1, 2, 2}, 2), 2.0 / 4.0);
  EXPECT_DOUBLE_EQ(sequential_p(10.0, {0, 1, 2}, 2), 0.25);
  EXPECT_DOUBLE_EQ(sequential_p(1.5, {0, 1, 2}, 0), monte_carlo_p(1.5, {0, 1, 2}));
  EXPECT_THROW(sequential_p(0.0, {}, 3), InputError);
}

TEST(Sensitivity, RejectsBadInput) {
  EXPECT_THROW(nw_confidence_reference({0.5, 0.6}, {1.0}, {0, 1}), InputError);
  EXPECT_THROW(nw_confidence_reference({0.5, 0.6, 0.7}, {1.0, 0.0, 1.0}, {0}), InputError);
  EXPECT_THROW(nw_confidence_reference({0.5, 0.6, 0.7}, {1.0, 0.0, 1.0}, {0, 5}), InputError);
  EXPECT_THROW(nw_confidence_reference({0.5, 1.6, 0.7}, {1.0, 0.0, 1.0}, {0, 1}), InputError);
  EXPECT_THROW(nw_confidence_reference({0.5, 0.6, 0.7}, {1.0, 0.5, 1.0}, {0, 1}), InputError);
  EXPECT_THROW(standardise({1.0, 1.0, 1.0}, "test", "x"), InputError);
  EXPECT_THROW(standardise({1.0, NAN}, "test", "x"), InputError);
  EXPECT_THROW(fit_correction_probe({0.5, 0.5}, {0.0, 1.0}, {1.0, 0.0}, -1.0), InputError);
  EXPECT_THROW(fit_correction_probe({0.5, 1.0}, {0.0, 1.0}, {1.0, 0.0}, 1.0), InputError);
  EXPECT_THROW(fit_correction_probe({0.5, 0.5}, {0.0}, {1.0, 0.0}, 1.0), InputError);
  EXPECT_THROW(apply_correction_probe({}, {0.5}, {0.0, 1.0}), InputError);
}
