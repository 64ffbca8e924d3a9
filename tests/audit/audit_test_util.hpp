// Shared helpers for the audit tests: the 99 % binomial acceptance band used by the type-I checks.
#pragma once

#include <cstddef>
#include <utility>

#include "stats/paired_tests.hpp"

namespace arcal::test_util {

/// [lo, hi] rejection counts with P(X < lo) <= 0.005 and P(X > hi) <= 0.005, X ~ Bin(n, p).
inline std::pair<std::size_t, std::size_t> binomial_band_99(std::size_t n, double p) {
  std::size_t lo = 0;
  while (lo < n && binomial_cdf(lo, n, p) <= 0.005) ++lo;  // P(X <= lo - 1) <= 0.005 stays true below
  std::size_t hi = n;
  while (hi > 0 && 1.0 - binomial_cdf(hi - 1, n, p) <= 0.005) --hi;
  return {lo, hi};
}

}  // namespace arcal::test_util
