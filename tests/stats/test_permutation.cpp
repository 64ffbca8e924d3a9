// Within-stratum permutation null: exact small-case distribution, the finite-population variance
// S^2 (1/n_top + 1/n_bottom) of a difference of group means, p-value bounds and seeding.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "stats/fast_rng.hpp"
#include "stats/permutation.hpp"

using namespace arcal;

TEST(Permutation, ExactSmallStratumDistribution) {
  // values {1,0,0,0}, one top and one bottom: contrast = +1 w.p. 1/4, -1 w.p. 1/4, 0 w.p. 1/2.
  ContrastStratum s{{1, 0, 0, 0}, 1, 1, 1.0};
  const int R = 40000;
  const auto null = within_stratum_permutation_null({s}, R, 11);
  int plus = 0, minus = 0, zero = 0;
  for (double g : null) {
    if (g > 0.5)
      ++plus;
    else if (g < -0.5)
      ++minus;
    else if (std::abs(g) < 1e-12)
      ++zero;
  }
  EXPECT_EQ(plus + minus + zero, R);
  // Binomial sd of a 1/4 frequency over 40000 draws is 0.0022; allow 5 sd.
  EXPECT_NEAR(plus / double(R), 0.25, 0.011);
  EXPECT_NEAR(minus / double(R), 0.25, 0.011);
  EXPECT_NEAR(zero / double(R), 0.5, 0.0125);
}

TEST(Permutation, NullVarianceMatchesFinitePopulationFormula) {
  // Var(mean_A - mean_B) = S^2 (1/n_A + 1/n_B) under random disjoint groups (S^2 with n - 1).
  Rng rng(3);
  ContrastStratum a, b;
  for (int i = 0; i < 90; ++i) a.values.push_back(rng.normal());
  for (int i = 0; i < 61; ++i) b.values.push_back(rng.uniform() < 0.3 ? 1.0 : 0.0);
  a.n_top = 30;
  a.n_bottom = 30;
  a.weight = 0.6;
  b.n_top = 20;
  b.n_bottom = 21;
  b.weight = 0.4;
  auto s2 = [](const std::vector<double>& v) {
    const double m = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
    double ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    return ss / (v.size() - 1);
  };
  const double var = 0.36 * s2(a.values) * (1.0 / 30 + 1.0 / 30) + 0.16 * s2(b.values) * (1.0 / 20 + 1.0 / 21);
  const int R = 50000;
  const auto null = within_stratum_permutation_null({a, b}, R, 5);
  double m = 0, v = 0;
  for (double g : null) m += g;
  m /= R;
  for (double g : null) v += (g - m) * (g - m);
  v /= (R - 1);
  // Mean 0 within 4 standard errors; variance within 3 % (its relative sd is ~sqrt(2/R) = 0.6 %).
  EXPECT_NEAR(m, 0.0, 4 * std::sqrt(var / R));
  EXPECT_NEAR(v / var, 1.0, 0.03);
}

TEST(Permutation, PValueBoundsAndSeeding) {
  ContrastStratum s{{1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0.5, 0.5}, 5, 5, 1.0};
  const auto r = within_stratum_permutation_test({s}, 999, 1);
  EXPECT_DOUBLE_EQ(r.statistic, 1.0);
  // Only the 2 arrangements with all ones in top (1/252) or bottom reach |G| = 1; p is tiny, >= 1/(R+1).
  EXPECT_GE(r.p, 1.0 / 1000);
  EXPECT_LT(r.p, 0.05);
  EXPECT_EQ(r.p, (1.0 + r.exceed) / 1000.0);
  const auto r2 = within_stratum_permutation_test({s}, 999, 1);
  EXPECT_EQ(r.exceed, r2.exceed);
  EXPECT_NE(within_stratum_permutation_null({s}, 50, 1), within_stratum_permutation_null({s}, 50, 2));
  // G = 0 exactly: every permutation counts, p = 1.
  ContrastStratum flat{{0.5, 0.5, 0.5, 0.5}, 1, 1, 1.0};
  EXPECT_DOUBLE_EQ(within_stratum_permutation_test({flat}, 99, 1).p, 1.0);
  EXPECT_DOUBLE_EQ(permutation_p_value(0.3, {0.1, -0.3, 0.5, 0.2}), 3.0 / 5.0);
}

TEST(Permutation, RejectsMalformedStrata) {
  EXPECT_THROW(within_stratum_permutation_null({ContrastStratum{{1, 2}, 0, 1, 1}}, 10, 1), InputError);
  EXPECT_THROW(within_stratum_permutation_null({ContrastStratum{{1, 2}, 2, 1, 1}}, 10, 1), InputError);
  EXPECT_THROW(within_stratum_permutation_null({ContrastStratum{{1, NAN}, 1, 1, 1}}, 10, 1), InputError);
  EXPECT_THROW(within_stratum_permutation_null({ContrastStratum{{1, 2}, 1, 1, 1}}, 0, 1), InputError);
  EXPECT_THROW(permutation_p_value(1.0, {}), InputError);
}

TEST(FastRng, BoundedDrawsAreUniformAndSeeded) {
  // Chi-square of 70,000 draws over 7 cells (6 df): the 99.9 % point is 22.46.
  FastRng rng(42);
  std::vector<double> count(7, 0.0), pair_count(7, 0.0);
  for (int i = 0; i < 70000; ++i) {
    const auto v = rng.below(7);
    ASSERT_LT(v, 7u);
    count[v] += 1;
    std::uint32_t a, b;
    rng.below_pair(7, 3, a, b);
    ASSERT_LT(a, 7u);
    ASSERT_LT(b, 3u);
    pair_count[a] += 1;
  }
  double chi = 0, chi_pair = 0;
  for (int k = 0; k < 7; ++k) {
    chi += (count[k] - 10000) * (count[k] - 10000) / 10000;
    chi_pair += (pair_count[k] - 10000) * (pair_count[k] - 10000) / 10000;
  }
  EXPECT_LT(chi, 22.46);
  EXPECT_LT(chi_pair, 22.46);
  FastRng a(5), b(5), c(6);
  EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_NE(a.next_u64(), c.next_u64());
  // uniform() in [0, 1) with mean 1/2 (sd of the mean of 10^5 draws = 0.0009).
  double m = 0;
  for (int i = 0; i < 100000; ++i) m += rng.uniform();
  EXPECT_NEAR(m / 100000, 0.5, 0.004);
}

// Grouped strata (the conditional permutation of method.md §6.1): strata with their own group
// coefficients, empty groups allowed.
TEST(GroupedPermutation, ExactDistributionWithUnequalCoefficientsAndEmptyGroups) {
  // Stratum A: values {1, 0, 0}, one top (coef 2) and no bottom: contributes 2 w.p. 1/3, else 0.
  // Stratum B: values {1, 0}, no top, one bottom (coef -1): contributes -1 w.p. 1/2, else 0.
  // Stratum C: values {5, 5}, both top: a constant 0.1 * 10 = 1 (no draws).
  // Observed (top first, then bottom): A 2 * 1, B -1 * 1, C 1.
  GroupedStratum a{{1, 0, 0}, 1, 0, 2.0, -7.0}, b{{1, 0}, 0, 1, 3.0, -1.0}, c{{5, 5}, 2, 0, 0.1, 0.0};
  EXPECT_DOUBLE_EQ(grouped_contrast({a, b, c}), 2.0 - 1.0 + 1.0);
  const int R = 60000;
  const auto null = grouped_permutation_null({a, b, c}, R, 4);
  // G* - 1 takes 2 - 1 = 1 (1/6), 2 (1/3), -1 (1/6), 0 (1/3) for the (A, B) combinations.
  std::map<long, int> count;
  for (double g : null) ++count[std::lround(g - 1.0)];
  ASSERT_EQ(count.size(), 4u);
  EXPECT_NEAR(count[1] / double(R), 1.0 / 6, 0.01);
  EXPECT_NEAR(count[2] / double(R), 1.0 / 6, 0.01);
  EXPECT_NEAR(count[-1] / double(R), 1.0 / 3, 0.012);
  EXPECT_NEAR(count[0] / double(R), 1.0 / 3, 0.012);
}

TEST(GroupedPermutation, WithinStratumNullIsTheGroupedNullWithMeanCoefficients) {
  // The paper protocol's null is the grouped kernel with coef = ±weight / group size: bit for bit.
  Rng rng(9);
  std::vector<ContrastStratum> cs;
  std::vector<GroupedStratum> gs;
  for (int b = 0; b < 5; ++b) {
    ContrastStratum s;
    for (int i = 0; i < 31 + 7 * b; ++i) s.values.push_back(rng.uniform() < 0.6 ? 0.4 : -0.6);
    s.n_top = 10 + b;
    s.n_bottom = 9 + 2 * b;
    s.weight = 0.1 + 0.05 * b;
    gs.push_back({s.values, s.n_top, s.n_bottom, s.weight / s.n_top, -s.weight / s.n_bottom});
    cs.push_back(s);
  }
  EXPECT_EQ(within_stratum_permutation_null(cs, 1001, 77), grouped_permutation_null(gs, 1001, 77));
  EXPECT_NEAR(weighted_contrast(cs), grouped_contrast(gs), 1e-15);
}

TEST(GroupedPermutation, RejectsMalformedStrata) {
  EXPECT_THROW(grouped_permutation_null({GroupedStratum{{1, 2}, 2, 1, 1, -1}}, 10, 1), InputError);
  EXPECT_THROW(grouped_permutation_null({GroupedStratum{{1, NAN}, 1, 1, 1, -1}}, 10, 1), InputError);
  EXPECT_THROW(grouped_permutation_null({GroupedStratum{{1, 2}, 1, 1, NAN, -1}}, 10, 1), InputError);
  EXPECT_THROW(grouped_permutation_null({GroupedStratum{{1, 2}, 1, 1, 1, -1}}, 0, 1), InputError);
}
