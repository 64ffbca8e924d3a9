// Paired tests across runs (method.md §6.4): Wilcoxon signed-rank (exact null distribution for small
// samples without ties, normal approximation with tie and continuity correction otherwise) and the
// exact binomial sign test. Zero differences are dropped in both (Wilcoxon's original convention,
// scipy's zero_method="wilcox").
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace arcal {

struct WilcoxonResult {
  double statistic = 0.0;  ///< min(W+, W-) (scipy's two-sided statistic)
  double w_plus = 0.0;     ///< sum of ranks of positive differences
  double z = 0.0;          ///< normal score (0 when exact)
  double p = 1.0;          ///< two-sided
  std::size_t n = 0;       ///< non-zero differences used
  std::size_t zeros = 0;   ///< zero differences dropped
  bool exact = false;
};

/// Two-sided Wilcoxon signed-rank test of differences d [n]. Exact when the non-zero |d| have no
/// ties and n <= exact_max (default 50, scipy's rule); otherwise normal approximation with the tie
/// correction of the variance and, when `continuity` is true, a 0.5 continuity correction.
/// Throws InputError when some d is not finite or every difference is zero.
WilcoxonResult wilcoxon_signed_rank(const std::vector<double>& d, bool continuity = true, std::size_t exact_max = 50);

struct SignTestResult {
  std::size_t positive = 0;
  std::size_t negative = 0;
  std::size_t zeros = 0;
  double p = 1.0;  ///< exact two-sided: min(1, 2 P(X <= min(pos, neg))), X ~ Bin(pos+neg, 1/2)
};

/// Exact sign test of differences d [n]. Throws InputError when some d is not finite or all are zero.
SignTestResult sign_test(const std::vector<double>& d);

/// P(X <= k) for X ~ Binomial(n, p), summed in log space (exact to rounding for any n).
double binomial_cdf(std::size_t k, std::size_t n, double p);

/// The 99 % acceptance band of a rejection count X ~ Bin(n, p): [lo, hi] with P(X < lo) <= 0.005 and
/// P(X > hi) <= 0.005 (what the type-I checks and docs/audit_validation.md compare counts with).
std::pair<std::size_t, std::size_t> binomial_band_99(std::size_t n, double p);

/// Standard normal CDF.
double normal_cdf(double x);

}  // namespace arcal
