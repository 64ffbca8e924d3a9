// The exact binomial interval (stats/distributions.hpp, issue 55: 20/20 correct gave the accuracy
// interval [1, 1]) against its closed forms at k = 0 and k = n and against published values.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "stats/distributions.hpp"

using namespace arcal;

TEST(ClopperPearson, ClosedFormsAtTheEnds) {
  for (std::size_t n : {1u, 5u, 20u, 1000u}) {
    const auto all = clopper_pearson(n, n, 0.95);
    EXPECT_NEAR(all.low, std::pow(0.025, 1.0 / double(n)), 1e-9) << n;
    EXPECT_EQ(all.high, 1.0);
    const auto none = clopper_pearson(0, n, 0.95);
    EXPECT_EQ(none.low, 0.0);
    EXPECT_NEAR(none.high, 1.0 - std::pow(0.025, 1.0 / double(n)), 1e-9) << n;
  }
  EXPECT_NEAR(clopper_pearson(20, 20).low, 0.8316, 1e-4);  // 20/20: [0.832, 1], not [1, 1]
}

TEST(ClopperPearson, MatchesPublishedValues) {
  // Clopper & Pearson (1934) / scipy.stats.binomtest(k, n).proportion_ci(method="exact").
  const auto a = clopper_pearson(3, 10, 0.95);
  EXPECT_NEAR(a.low, 0.066739, 1e-5);
  EXPECT_NEAR(a.high, 0.652453, 1e-5);
  const auto b = clopper_pearson(50, 100, 0.95);
  EXPECT_NEAR(b.low, 0.398321, 1e-5);
  EXPECT_NEAR(b.high, 0.601679, 1e-5);
  EXPECT_THROW(clopper_pearson(3, 2), InputError);
  EXPECT_THROW(clopper_pearson(0, 0), InputError);
}
