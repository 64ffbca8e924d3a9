// Across-run inference of method.md §6.4: the random-effects meta-analysis of per-run effects with the
// Paule-Mandel between-run variance and the Hartung-Knapp t-interval on k - 1 degrees of freedom, and the smallest
// p-values that the rank tests can reach with n runs.
#pragma once

#include <cstddef>
#include <vector>

#include "stats/distributions.hpp"

namespace arcal {

struct RandomEffectsResult {
  std::size_t k = 0;             ///< runs
  double mean = 0.0;             ///< random-effects pooled effect Σ w y / Σ w, w = 1 / (v + τ²)
  double se = 0.0;               ///< Hartung-Knapp standard error sqrt(hk_scale / Σ w)
  double hk_scale = 0.0;         ///< Σ w (y − mean)² / (k − 1): the HK variance scale
  double tau2 = 0.0;             ///< Paule-Mandel between-run variance (>= 0)
  double q = 0.0;                ///< Cochran's Q with the within-run weights 1 / v
  double df = 0.0;               ///< k − 1
  double low = 0.0, high = 0.0;  ///< mean ∓ t_{k−1, 1−α/2} se
  double p = 1.0;                ///< two-sided, t_{k−1}
};

/// Random-effects meta-analysis of per-run effects y [k] with within-run variances v [k] (> 0; a zero
/// variance is raised to 1e-300 so that its run dominates the weights), Hartung-Knapp interval at
/// `level`; the between-run variance by Paule-Mandel (generalised Q = k − 1). Needs k >= 2. When every y is identical
/// the standard error is 0: p is 1 if that value is 0 and 0 otherwise, and the interval collapses to the value. Throws
/// InputError on k < 2, mismatched sizes, non-finite values, negative variances or a level outside (0, 1).
RandomEffectsResult hartung_knapp(const std::vector<double>& y, const std::vector<double>& v, double level = 0.95);

/// Smallest two-sided p-value the exact Wilcoxon signed-rank test can give with n non-zero differences
/// (2 / 2^n, 1 when n = 0) and the exact sign test (2 · 0.5^n); the same value for both.
double smallest_rank_test_p(std::size_t n);

}  // namespace arcal
