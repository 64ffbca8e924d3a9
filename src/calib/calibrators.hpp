// Post-hoc calibrators of method.md §5, each fitted on a calibration split and applied to another:
// temperature (Newton on beta = 1/T), Platt, isotonic (PAV), histogram binning, Nadaraya-Watson
// (1-D/2-D Gaussian product kernel; the estimator AR-CondCal reuses), vector and matrix scaling,
// and QaTS. Logits/probabilities are row-major [N, K]; labels [N]; confidences/targets [N].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stats/kernels.hpp"

namespace arcal {

// ---- temperature scaling
struct TemperatureFit {
  double beta = 1.0;         ///< 1/T
  double temperature = 1.0;  ///< 1/beta (inf/negative when beta <= 0)
  bool converged = false;
  int iterations = 0;
  double nll = 0.0;                                    ///< calibration-set NLL at beta
  bool ok() const { return converged && beta > 0.0; }  ///< beta <= 0 is a failed fit, never hidden
};
/// Minimises mean NLL(softmax(beta z), y) by Newton on beta from beta = 1 (convex in beta) with
/// step halving. Throws InputError on bad shapes/labels/non-finite logits.
TemperatureFit fit_temperature(const std::vector<double>& logits, std::size_t n, std::size_t k,
                               const std::vector<std::int64_t>& labels, int max_iter = 100, double tol = 1e-10);
/// softmax(beta * z) row-wise, [N, K].
std::vector<double> softmax_scaled(const std::vector<double>& logits, std::size_t n, std::size_t k, double beta);

// ---- Platt scaling on logit c: q = sigmoid(a * logit(c) + b), maximum likelihood by Newton.
struct PlattFit {
  double a = 1.0, b = 0.0;
  bool converged = false;
  int iterations = 0;
};
PlattFit fit_platt(const std::vector<double>& conf, const std::vector<double>& correct, int max_iter = 100);
/// Platt scaling P = σ(a·x + b) on given logits x (no clipping; correct may be soft labels in [0, 1]) by
/// the same damped Newton iteration, with a ridge (ridge/2)·((a − a0)² + (b − b0)²) towards `prior`
/// (ridge 0: maximum likelihood started at prior). No input checks: the caller's arrays are valid.
PlattFit fit_platt_on_logits(const std::vector<double>& x, const std::vector<double>& correct, int max_iter = 100,
                             double ridge = 0.0, const PlattFit& prior = {});
std::vector<double> apply_platt(const PlattFit& fit, const std::vector<double>& conf);

// ---- isotonic regression (pool-adjacent-violators, non-decreasing)
/// PAV on y ordered by x (ties in x pooled first, as scikit-learn does), optional weights ([N] or empty).
/// Returns the fitted value per *sorted distinct x*; see IsotonicFit.
struct IsotonicFit {
  std::vector<double> x;  ///< distinct thresholds, increasing
  std::vector<double> y;  ///< fitted non-decreasing values at x
};
IsotonicFit fit_isotonic(const std::vector<double>& x, const std::vector<double>& y,
                         const std::vector<double>& weights = {});
/// Linear interpolation between thresholds, clipped to the end values outside (scikit-learn's
/// IsotonicRegression(out_of_bounds="clip")).
std::vector<double> apply_isotonic(const IsotonicFit& fit, const std::vector<double>& x);
/// Weighted PAV of a sequence already in order: the non-decreasing least-squares fit, [M] -> [M].
std::vector<double> pool_adjacent_violators(const std::vector<double>& y, const std::vector<double>& weights = {});

// ---- histogram binning: equal-width bins of c, each mapped to its calibration-set accuracy
// (an empty bin maps to its midpoint).
struct HistogramFit {
  int bins = 15;
  std::vector<double> value;  ///< [B]
};
HistogramFit fit_histogram(const std::vector<double>& conf, const std::vector<double>& correct, int bins = 15);
std::vector<double> apply_histogram(const HistogramFit& fit, const std::vector<double>& conf);

// ---- Nadaraya-Watson with a Gaussian product kernel
/// q(x) = (sum_j K_h(x - x_j) t_j + pseudo * tbar) / (sum_j K_h(x - x_j) + pseudo), clipped, where
/// K_h = prod_d exp(-(x_d - x_jd)^2 / (2 h_d^2)) and tbar the mean training target. Options are the
/// kernel estimator's (stats/kernels.hpp); this direct O(M Q D) form reads pseudo_count and the clip
/// only (no truncation, the prior is always the mean target).
/// train [M, D] row-major, targets [M], bandwidths [D] (> 0), query [Q, D] -> [Q]. Features are used as
/// given (standardise before calling). Cost O(M Q D). Throws InputError on bad shapes or bandwidths.
std::vector<double> nadaraya_watson(const std::vector<double>& train, const std::vector<double>& targets,
                                    std::size_t dims, const std::vector<double>& bandwidths,
                                    const std::vector<double>& query, const NadarayaWatsonOptions& options = {});
/// Scott's rule for a D-dimensional Gaussian product kernel: h_d = sd_d * n^(-1/(D+4)).
std::vector<double> scott_bandwidths(const std::vector<double>& features, std::size_t dims);

// ---- vector / matrix scaling: p = softmax(W z + b), W diagonal (vector) or full (matrix).
struct LinearScalingFit {
  bool diagonal = true;
  std::size_t k = 0;
  std::vector<double> w;  ///< [K] (diagonal) or [K, K] row-major
  std::vector<double> b;  ///< [K]
  bool converged = false;
  int iterations = 0;
  double nll = 0.0;  ///< penalised calibration-set NLL at the optimum
};
/// Fitted by L-BFGS (memory 10, backtracking Armijo line search) on mean NLL + l2/2 * (||W - I||^2 + ||b||^2),
/// from W = I, b = 0. l2 = 1e-4 keeps the problem strictly convex (matrix scaling overfits otherwise).
LinearScalingFit fit_linear_scaling(const std::vector<double>& logits, std::size_t n, std::size_t k,
                                    const std::vector<std::int64_t>& labels, bool diagonal, double l2 = 1e-4,
                                    int max_iter = 500);
std::vector<double> apply_linear_scaling(const LinearScalingFit& fit, const std::vector<double>& logits, std::size_t n);

// ---- QaTS: quantile-adaptive temperature scaling (method.md §5, our reading of the abstract).
/// u_i = F̂(c_i), the empirical CDF of the fitting split's uncalibrated confidences (fraction <= c_i);
/// T(u) > 0 piecewise linear on `knots` equally spaced knots in u, monotone in the direction the data
/// choose (both directions are fitted on 80 % of the split and the one with the lower objective on
/// the other 20 % is refitted on all of it); p_i = softmax(z_i / T(u_i)). Objective: the soft-binned
/// ECE of the calibrated confidences with M anchors equally spaced in u (equal mass: the
/// reparameterised ECE; membership softmax_j(−(u − ζ_j)² / 0.01), fixed) + 0.1 · mean NLL, minimised
/// by L-BFGS over T_first = 0.05 + e^{a_0} and positive increments e^{a_j} in the direction's order
/// (monotone and T >= 0.05 by construction) from plain temperature scaling's T. The ECE term is what keeps it from
/// collapsing to one temperature: a likelihood objective under a monotone constraint is minimised by TS whenever TS is
/// nearly right.
struct QatsFit {
  std::vector<double> temperature;       ///< [J] T at the knots
  int direction = 1;                     ///< +1: T non-decreasing in u; −1: non-increasing
  std::vector<double> calib_confidence;  ///< sorted fitting-split confidences (defines u)
  bool converged = false;
  int iterations = 0;
  double objective = 0.0;                  ///< SB-ECE + 0.1 NLL at the optimum on the fitting split
  double inner_objective[2] = {0.0, 0.0};  ///< held-out (20 %) objective of the increasing / decreasing fit
};
QatsFit fit_qats(const std::vector<double>& logits, std::size_t n, std::size_t k,
                 const std::vector<std::int64_t>& labels, int knots = 8, int max_iter = 500, std::uint64_t seed = 0);
std::vector<double> apply_qats(const QatsFit& fit, const std::vector<double>& logits, std::size_t n, std::size_t k);

/// Replaces the top-label probability of each row by q_i and rescales the other entries to sum to 1 - q_i
/// (how confidence-only calibrators produce full probability vectors). probs [N, K], q [N]. A q_i so
/// low that a rescaled other class would overtake the top one is raised to where they tie (the top
/// class kept on top), so the predicted class never changes.
std::vector<double> set_top_probability(const std::vector<double>& probs, std::size_t n, std::size_t k,
                                        const std::vector<double>& q);

}  // namespace arcal
