// Kernel estimators for the audit: Scott's bandwidth rule and a multivariate Nadaraya-Watson
// regression with a Gaussian product kernel, a pseudo-count towards a prior and clipping
// (AR-CondCal, method.md §6.2; also the 1-D reference q(c) of §6.5).
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <vector>

namespace arcal {

/// Scott's rule in d dimensions for one coordinate: multiple * sd(values, ddof = 1) * n^(-1/(d+4)).
/// (d = 2 gives method.md's n^(-1/6); the 1-D control uses n^(-1/5).) Throws InputError when n < 2,
/// a value is not finite, dims == 0, multiple <= 0, or the values are constant (sd == 0).
double scott_bandwidth(const std::vector<double>& values, std::size_t dims, double multiple = 1.0);

struct NadarayaWatsonOptions {
  double pseudo_count = 1.0;  ///< weight of the prior (>= 0)
  /// Prior the estimate is shrunk towards; NaN means the mean of the targets.
  double prior = std::numeric_limits<double>::quiet_NaN();
  double clip_low = 1e-4;
  double clip_high = 1.0 - 1e-4;
  /// Points further than truncate * h along any coordinate get weight 0 (exp(-32) ~ 1e-14 at 8).
  double truncate = 8.0;
  /// The box expansion (a fast Gauss transform) in one or two dimensions with at least 2048 points:
  /// every estimate within 1e-9 * (max|y| + |estimate|) of the exact sum (each query checks its own
  /// bound and falls back to the exact sum when it fails). false: always the exact sum.
  bool fast = true;
  /// Query workers (0 = all cores). The estimates do not depend on it (each query is one sum).
  int threads = 1;
};

/// ŷ(x) = (Σ_j K_j y_j + λ·prior) / (Σ_j K_j + λ), K_j = Π_d exp(-(x_d - X_jd)² / (2 h_d²)),
/// clipped to [clip_low, clip_high].
///
/// Cost. The exact sum visits, per query, the points within truncate·h in the first coordinate (sorted
/// once): O(n·m) at the audit's bandwidths, where that window holds most points. The fast path (one
/// and two dimensions, n >= 2048; options.fast) groups the points in boxes of side sqrt(2)·h and sums a
/// box of more than 24 points through its 20-term Hermite expansion per coordinate (Greengard & Strain
/// 1991), smaller boxes directly: O(n·400) to form the expansions and at most 13^d boxes per query. In
/// two dimensions the queries sharing a box (32 or more) take one local (Taylor) expansion of every
/// source box in reach and evaluate it in 400 multiply-adds each. Its error bound is computed per query
/// from Cramér's inequality for Hermite functions; a query whose bound exceeds the tolerance is summed
/// by the next tighter method (local, then Hermite, then exact). A query's estimate may depend on the
/// other queries of the call (whether its box gathers 32 of them), by less than the bound.
class NadarayaWatson {
 public:
  /// x: row-major [n, dims]; y: [n]; bandwidth: [dims], all > 0. Throws InputError on mismatched
  /// sizes, non-finite values, n == 0, or a non-positive bandwidth (naming the index).
  NadarayaWatson(const std::vector<double>& x, const std::vector<double>& y, std::size_t dims,
                 const std::vector<double>& bandwidth, const NadarayaWatsonOptions& options = {});

  /// Estimates at query rows x: row-major [m, dims] -> [m]. Throws InputError when x.size() is not a
  /// multiple of dims or a value is not finite.
  std::vector<double> predict(const std::vector<double>& x) const;

  /// predict for T other target vectors on the same points: ys[t] ([n] each, in the order of the
  /// constructor's x) replaces y, and the prior is each target's mean (or options.prior). Each kernel
  /// weight is computed once for all targets; column t equals
  /// NadarayaWatson(x, ys[t], dims, bandwidth, options).predict(x_query) exactly (the same sums in the
  /// same order). Returns [T][m]. Throws InputError as predict, or when a ys[t] has the wrong size or
  /// a non-finite value.
  std::vector<std::vector<double>> predict_many(const std::vector<double>& x,
                                                const std::vector<const std::vector<double>*>& ys) const;

  double prior() const { return prior_; }

  /// Whether the fast path is in use (options.fast, dims <= 2, n >= 2048).
  bool fast() const { return boxes_ != nullptr; }

  struct Boxes;  ///< the fast path's box index (kernels.cpp)

 private:
  /// Kernel sums at one query q (bandwidth-scaled) over T targets Y ([n][T], sorted order): exact.
  void exact_sums(const double* q, const double* Y, std::size_t T, double* num, double& den) const;
  /// Estimates [T][m] for targets Y with priors `prior` at the query rows x.
  std::vector<std::vector<double>> estimate(const std::vector<double>& x, const std::vector<double>& Y, std::size_t T,
                                            const std::vector<double>& prior, const char* fn) const;

  std::size_t dims_;
  std::vector<double> x_;  // rows sorted by the first coordinate, scaled by 1/h
  std::vector<double> y_;
  std::vector<std::size_t> order_;  // sorted position -> row of the constructor's x
  std::vector<double> inv_h_;
  NadarayaWatsonOptions options_;
  double prior_;
  std::shared_ptr<const Boxes> boxes_;  // null: the exact sum only
};

}  // namespace arcal
