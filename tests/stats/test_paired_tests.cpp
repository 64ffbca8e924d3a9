// Wilcoxon signed-rank and sign tests against published scipy values and hand computations.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "stats/paired_tests.hpp"

using namespace arcal;

namespace {
// Darwin's Zea mays differences (Fisher 1935), the example of scipy.stats.wilcoxon's documentation.
const std::vector<double> kDarwin = {6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75};
}  // namespace

TEST(Wilcoxon, ExactMatchesScipyDocs) {
  // scipy docs: wilcoxon(d) -> statistic 24.0, pvalue 0.041259765625 (exact, 676 of 2^15 subsets x 2).
  const auto r = wilcoxon_signed_rank(kDarwin);
  EXPECT_TRUE(r.exact);
  EXPECT_EQ(r.n, 15u);
  EXPECT_DOUBLE_EQ(r.statistic, 24.0);
  EXPECT_DOUBLE_EQ(r.w_plus, 96.0);
  EXPECT_DOUBLE_EQ(r.p, 0.041259765625);
}

TEST(Wilcoxon, NormalApproximationMatchesScipyDocs) {
  // scipy docs: wilcoxon(d, method="approx") (correction=False) -> pvalue 0.04088813291185591.
  const auto r = wilcoxon_signed_rank(kDarwin, /*continuity=*/false, /*exact_max=*/0);
  EXPECT_FALSE(r.exact);
  EXPECT_NEAR(r.p, 0.04088813291185591, 1e-14);
  // With the continuity correction: z = (24 - 60 + 0.5) / sqrt(310), p = erfc(|z|/sqrt 2), by hand
  // in Python's math module: 0.043772323763041195.
  const auto c = wilcoxon_signed_rank(kDarwin, true, 0);
  EXPECT_NEAR(c.z, -2.01626451157708, 1e-12);
  EXPECT_NEAR(c.p, 0.043772323763041195, 1e-14);
}

TEST(Wilcoxon, TiesAndZerosUseCorrectedNormal) {
  // Hand computation: zero dropped (n = 11); ranks 0.5->1, 1->2, 1.5->3.5 (x2), 2->6.5 (x4), 3->9,
  // 4.5->10, 5->11; W- = 1 + 2 + 6.5 = 9.5; var = 11*12*23/24 - (6 + 60)/48 = 125.125;
  // z = (9.5 - 33 + 0.5)/sqrt(125.125) = -2.0561547188313014; p = 0.0397676053230758.
  const std::vector<double> d = {1.5, -0.5, 2.0, 2.0, -2.0, 3.0, 0.0, 4.5, 1.5, 2.0, -1.0, 5.0};
  const auto r = wilcoxon_signed_rank(d);
  EXPECT_FALSE(r.exact);
  EXPECT_EQ(r.zeros, 1u);
  EXPECT_EQ(r.n, 11u);
  EXPECT_DOUBLE_EQ(r.statistic, 9.5);
  EXPECT_NEAR(r.z, -2.0561547188313014, 1e-12);
  EXPECT_NEAR(r.p, 0.0397676053230758, 1e-13);
}

TEST(Wilcoxon, SymmetricAndInvalid) {
  // Sign flip leaves the two-sided p unchanged.
  std::vector<double> neg = kDarwin;
  for (auto& v : neg) v = -v;
  EXPECT_DOUBLE_EQ(wilcoxon_signed_rank(neg).p, wilcoxon_signed_rank(kDarwin).p);
  // n = 1: exact p = 2 * 1/2 = 1.
  EXPECT_DOUBLE_EQ(wilcoxon_signed_rank({3.0}).p, 1.0);
  EXPECT_THROW(wilcoxon_signed_rank({0.0, 0.0}), InputError);
  EXPECT_THROW(wilcoxon_signed_rank({1.0, NAN}), InputError);
}

TEST(SignTest, ExactBinomial) {
  // Darwin: 13 positive, 2 negative: p = 2 (1 + 15 + 105) / 2^15 = 242/32768.
  const auto r = sign_test(kDarwin);
  EXPECT_EQ(r.positive, 13u);
  EXPECT_EQ(r.negative, 2u);
  EXPECT_NEAR(r.p, 242.0 / 32768.0, 1e-15);
  // 2 of 10 with one zero dropped: p = 2 (1 + 10 + 45) / 1024 = 0.109375.
  const auto s = sign_test({1, 1, 1, 1, 1, 1, 1, 1, -1, -2, 0});
  EXPECT_EQ(s.zeros, 1u);
  EXPECT_NEAR(s.p, 0.109375, 1e-15);
  // Balanced: capped at 1.
  EXPECT_DOUBLE_EQ(sign_test({1, -1}).p, 1.0);
  EXPECT_THROW(sign_test({}), InputError);
}

TEST(Binomial, CdfClosedForms) {
  EXPECT_NEAR(binomial_cdf(0, 10, 0.5), 1.0 / 1024, 1e-16);
  EXPECT_NEAR(binomial_cdf(1, 3, 0.2), 0.8 * 0.8 * 0.8 + 3 * 0.2 * 0.64, 1e-15);
  EXPECT_DOUBLE_EQ(binomial_cdf(10, 10, 0.3), 1.0);
}
