// Rank correlation: Spearman's rho with average ranks for ties (= Pearson correlation of the
// ranks), used to relate routing mass to causal effect across (point, family) pairs.
#pragma once

#include <vector>

namespace arcal {

/// Average ranks (1-based) of x; ties share the mean of their ranks.
std::vector<double> average_ranks(const std::vector<double>& x);

/// Pearson correlation; NaN when either input is constant. Throws InputError on size mismatch or n < 2.
double pearson_correlation(const std::vector<double>& x, const std::vector<double>& y);

/// Spearman's rho with average ranks; NaN when either input is constant.
double spearman_correlation(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace arcal
