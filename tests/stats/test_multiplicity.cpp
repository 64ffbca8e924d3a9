// Holm and Benjamini-Hochberg adjustments against hand-computed values (which agree with
// R's p.adjust and statsmodels.stats.multitest.multipletests for the same inputs).
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "stats/multiplicity.hpp"

using namespace arcal;

TEST(Multiplicity, HolmHandValues) {
  // Sorted p = 0.005, 0.01, 0.03, 0.04 times (4, 3, 2, 1) = 0.02, 0.03, 0.06, 0.04; running max
  // gives 0.02, 0.03, 0.06, 0.06, restored to input order.
  const auto a = holm_adjust({0.01, 0.04, 0.03, 0.005});
  const std::vector<double> want = {0.03, 0.06, 0.06, 0.02};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-15) << i;
  // R: p.adjust(c(.01,.02,.03,.04,.05), "holm") = 0.05 0.08 0.09 0.09 0.09
  const auto b = holm_adjust({0.01, 0.02, 0.03, 0.04, 0.05});
  const std::vector<double> want_b = {0.05, 0.08, 0.09, 0.09, 0.09};
  for (std::size_t i = 0; i < want_b.size(); ++i) EXPECT_NEAR(b[i], want_b[i], 1e-15) << i;
  // Capped at 1.
  EXPECT_DOUBLE_EQ(holm_adjust({0.6, 0.7})[0], 1.0);
}

TEST(Multiplicity, BenjaminiHochbergHandValues) {
  // Sorted p times m/rank = 0.02, 0.02, 0.04, 0.04; running min from the top, input order.
  const auto a = bh_adjust({0.01, 0.04, 0.03, 0.005});
  const std::vector<double> want = {0.02, 0.04, 0.04, 0.02};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a[i], want[i], 1e-15) << i;
  // R: p.adjust(c(.01,.02,.03,.04,.05), "BH") = 0.05 for all.
  for (double v : bh_adjust({0.01, 0.02, 0.03, 0.04, 0.05})) EXPECT_NEAR(v, 0.05, 1e-15);
  // statsmodels docs-style example: p = (0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205)
  // BH: 0.008, 0.032, 0.0672, 0.0672, 0.0672, 0.08, 0.0845714..., 0.205 (hand: m/rank * p, running min).
  const auto c = bh_adjust({0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205});
  const std::vector<double> want_c = {0.008, 0.032, 0.0672, 0.0672, 0.0672, 0.08, 0.074 * 8 / 7, 0.205};
  for (std::size_t i = 0; i < want_c.size(); ++i) EXPECT_NEAR(c[i], want_c[i], 1e-12) << i;
}

TEST(Multiplicity, RejectsInvalidP) {
  EXPECT_THROW(holm_adjust({0.1, 1.5}), InputError);
  EXPECT_THROW(bh_adjust({-0.1}), InputError);
  EXPECT_TRUE(holm_adjust({}).empty());
}
