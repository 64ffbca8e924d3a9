// Multiple-testing adjustments for a declared test family: Holm's step-down family-wise error
// control and Benjamini-Hochberg false-discovery-rate adjusted p-values (R's p.adjust and
// statsmodels' multipletests conventions: adjusted values are monotone and capped at 1).
#pragma once

#include <vector>

namespace arcal {

/// Holm-adjusted p-values [m] in the input order. Throws InputError when some p is outside [0, 1]
/// or not finite (naming the index). An empty family returns an empty vector.
std::vector<double> holm_adjust(const std::vector<double>& p);

/// Benjamini-Hochberg adjusted p-values [m] in the input order. Throws as holm_adjust.
std::vector<double> bh_adjust(const std::vector<double>& p);

}  // namespace arcal
