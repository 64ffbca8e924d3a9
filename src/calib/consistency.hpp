// Consistency resampling (Bröcker & Smith 2007; method.md §4) and the intervals of binned calibration
// errors built on it. A binned error is a function of per-cell sums S = Σ_i (A_i − p_i); with labels
// redrawn as A_i ~ Bern(p_i + δ_cell) independent, each cell is sampled on its own: exactly (one
// Bernoulli per member) where that is needed, otherwise from an approximation whose error is bounded:
// normal when Σ p(1 − p) ≥ 10, Poisson when Σ p² ≤ 0.01 (Le Cam: total variation ≤ 2 Σ p²), the
// mirrored Poisson when Σ (1 − p)² ≤ 0.01. The cost of a draw is O(cells + members of exact cells).
// δ = 0 is a calibrated model (the consistency test). The interval of an error inverts the test along
// the family δ_cell = λ · d̃_cell (λ >= 0), d̃ the observed per-cell gap shrunk by its sampling noise:
// every λ whose sampling distribution puts the observed error inside its central 1 − α is kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "stats/fast_rng.hpp"

namespace arcal {

/// The generator of the label redraws: wyrand (stats/fast_rng.hpp) with Box-Muller normals.
class DrawRng {
 public:
  explicit DrawRng(std::uint64_t seed) : rng_(seed) {}
  double uniform() { return rng_.uniform(); }
  double normal();

 private:
  FastRng rng_;
  double cached_ = 0.0;
  bool has_cached_ = false;
};

/// One cell's sum of (Bernoulli(p_i) − p_i). Fill with add() (twice per member when exact members are
/// needed: see BernoulliSumCells), then sample().
class BernoulliSumCell {
 public:
  enum class Mode { empty, exact, normal, poisson_low, poisson_high };

  void add_stats(double p) {
    ++n_;
    sum_p_ += p;
    sum_var_ += p * (1.0 - p);
    sum_p2_ += p * p;
    sum_q2_ += (1.0 - p) * (1.0 - p);
  }
  /// Chooses the mode from the statistics; returns true when the members' p are needed (exact mode).
  bool decide();
  void add_member(double p) { members_.push_back(p); }
  /// One draw of Σ (Bernoulli(p_i + delta) − p_i), p_i + delta clipped to [0, 1] (exact cells; the
  /// approximations shift their mean and variance accordingly).
  double sample(DrawRng& rng, double delta = 0.0) const;
  Mode mode() const { return mode_; }
  std::size_t size() const { return n_; }
  double sum_p() const { return sum_p_; }
  double variance() const { return sum_var_; }

 private:
  std::size_t n_ = 0;
  double sum_p_ = 0, sum_var_ = 0, sum_p2_ = 0, sum_q2_ = 0;
  Mode mode_ = Mode::empty;
  std::vector<double> members_;
};

/// The cells of one binned calibration error with their observed residual sums.
struct ErrorCells {
  std::vector<BernoulliSumCell> cells;
  std::vector<double> observed;  ///< S_cell = Σ (a_i − p_i) [cells]
  double total = 0.0;            ///< normaliser: N (top-label) or N · K (classwise, the class average)
};

/// How an error is computed from cell sums S (n_c, Σp_c per cell): l1 = Σ |S_c| / total (ECE, AdaECE,
/// classwise ECE); l2 = sqrt(Σ S_c² / (n_c · total)) (RMSCE); debiased_l2 = Σ (n_c / total) ((S_c /
/// n_c)² − â_c (1 − â_c) / (n_c − 1)), â_c = (S_c + Σp_c) / n_c, over cells with n_c >= 2 (Kumar et al.'s
/// squared error, before the square root).
enum class CellError { l1, l2, debiased_l2 };

double cell_error(const ErrorCells& cells, const std::vector<double>& sums, CellError kind);

/// Top-label cells: equal-width (scheme width) or equal-mass (mass) bins of confidence [N], target
/// correct [N] in {0, 1}. Ready to sample.
ErrorCells top_label_cells(const std::vector<double>& confidence, const std::vector<double>& correct, int bins,
                           bool equal_mass);

/// Classwise cells (class, equal-width bin of p_ik) of probs [N, K] and labels [N].
ErrorCells classwise_cells(const std::vector<double>& probs, std::size_t n, std::size_t k,
                           const std::vector<std::int64_t>& labels, int bins);

struct FamilyInterval {
  double low = 0.0, high = 0.0;  ///< interval for the population error (for debiased_l2: of its square root)
  double median_unbiased = 0.0;  ///< the family member whose median error is the observed one (>= 0)
  double consistency_p = 1.0;    ///< P(error* >= observed) under calibration (λ = 0)
};

/// Test-inversion interval at `level` (draws per family member, common random numbers from seed).
/// The family's population error at λ is λ times the shape's (clipping of p + δ to [0, 1] is ignored
/// there). The lower end is 0 exactly when the consistency test does not reject at (1 − level)/2.
/// Throws InputError on draws < 1 or level outside (0, 1).
FamilyInterval scaled_family_interval(const ErrorCells& cells, CellError kind, double level, int draws,
                                      std::uint64_t seed);

/// Poisson(mean) by inversion (mean <= 100, as the cells that use it have) or normal beyond.
double poisson_draw(DrawRng& rng, double mean);

/// Consistency test of a top-label binned ECE: cells are the equal-width confidence bins; the null
/// statistic is Σ_b |S_b| / N. confidence [N] in [0, 1]. Returns the Monte-Carlo p-value
/// (1 + #{ECE* ≥ observed}) / (draws + 1). Throws InputError on empty input, draws < 1 or bins < 1.
double top_label_consistency_p(const std::vector<double>& confidence, double observed_ece, int bins, int draws,
                               std::uint64_t seed);

/// Consistency test of classwise ECE: cells are (class, equal-width bin of p_ik); the null statistic is
/// (1/K) Σ_k Σ_b |S_kb| / N with every cell's labels drawn from its own Bernoulli(p_ik) marginals (the
/// multinomial coupling across the classes of one row is ignored: each class's statistic has its exact
/// null, their sum an approximate one). probs [N, K] row-major, valid probabilities.
double classwise_consistency_p(const std::vector<double>& probs, std::size_t n, std::size_t k, double observed,
                               int bins, int draws, std::uint64_t seed);

}  // namespace arcal
