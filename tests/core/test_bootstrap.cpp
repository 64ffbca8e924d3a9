// Bootstrap and quantile checks against closed forms and numpy's quantile convention.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "stats/bootstrap.hpp"

using namespace arcal;

TEST(Quantile, MatchesNumpyLinearInterpolation) {
  // numpy.quantile([1,2,3,4], 0.25) == 1.75 (linear method, numpy's default)
  EXPECT_DOUBLE_EQ(quantile_sorted({1, 2, 3, 4}, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(quantile_sorted({1, 2, 3, 4}, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(quantile_sorted({5}, 0.5), 5.0);
}

TEST(Bootstrap, MeanIntervalHasNormalWidth) {
  // Bernoulli(0.3) sample of n = 2000: the bootstrap sd of the mean approaches sqrt(p(1-p)/n).
  const std::size_t n = 2000;
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = (i % 10) < 3 ? 1.0 : 0.0;
  auto mean = [&](const std::vector<std::size_t>& idx) {
    double s = 0;
    for (auto i : idx) s += x[i];
    return s / static_cast<double>(idx.size());
  };
  auto r = percentile_bootstrap(n, mean, 2000, 7);
  EXPECT_DOUBLE_EQ(r.estimate, 0.3);
  const double se = std::sqrt(0.3 * 0.7 / n);
  // 95% percentile interval half-width ~ 1.96 se; Monte-Carlo error of 2000 draws is a few percent.
  EXPECT_NEAR((r.ci.high - r.ci.low) / 2.0, 1.96 * se, 0.1 * 1.96 * se);
  EXPECT_LT(r.ci.low, 0.3);
  EXPECT_GT(r.ci.high, 0.3);
  // Same seed, same draws.
  auto r2 = percentile_bootstrap(n, mean, 2000, 7);
  EXPECT_EQ(r.draws, r2.draws);
}

TEST(Bootstrap, RejectsEmptySample) {
  EXPECT_THROW(percentile_bootstrap(
                   0, [](const std::vector<std::size_t>&) { return 0.0; }, 10, 1),
               InputError);
}

TEST(Bootstrap, CountsAreTheSameResamplesAsIndices) {
  // bootstrap_counts(n, seed, b) must be the multiplicities of percentile_bootstrap's resample b, so
  // the O(N) weighted metrics in calib/metrics see exactly the resamples this function defines.
  const std::size_t n = 257;
  std::vector<std::vector<std::uint32_t>> from_indices;
  bool first = true;
  percentile_bootstrap(
      n,
      [&](const std::vector<std::size_t>& idx) {
        if (first) {
          first = false;  // the original sample
          return 0.0;
        }
        std::vector<std::uint32_t> c(n, 0);
        for (auto i : idx) ++c[i];
        from_indices.push_back(c);
        return 0.0;
      },
      5, 99);
  ASSERT_EQ(from_indices.size(), 5u);
  std::vector<std::uint32_t> counts;
  for (std::uint64_t b = 0; b < 5; ++b) {
    bootstrap_counts(n, 99, b, counts);
    EXPECT_EQ(counts, from_indices[b]) << "resample " << b;
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), 0u), n);
  }
  EXPECT_THROW(bootstrap_counts(0, 1, 0, counts), InputError);
}
