// Seeded percentile bootstrap over example indices: every headline number in arcal carries one.
// The statistic sees a resample as a vector of indices into the original data (with repetition).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace arcal {

struct Interval {
  double low = 0.0;
  double high = 0.0;
};

struct BootstrapResult {
  double estimate = 0.0;      ///< statistic on the original sample
  Interval ci;                ///< percentile interval at `level`
  std::vector<double> draws;  ///< statistic on each resample (size = draws requested)
};

/// Percentile bootstrap of statistic(indices) over n examples.
/// draws >= 1, 0 < level < 1. Throws InputError when n == 0.
/// Resample b uses Rng(derive_seed(seed, b)), so results do not depend on threading.
BootstrapResult percentile_bootstrap(std::size_t n,
                                     const std::function<double(const std::vector<std::size_t>&)>& statistic, int draws,
                                     std::uint64_t seed, double level = 0.95);

/// Multiplicities of resample b (b >= 0) of percentile_bootstrap(n, ..., seed): counts[i] = how many
/// of the n draws picked example i (sum = n). The same stream as percentile_bootstrap's resample b, so
/// a statistic computed from counts (O(N), no index vector) sees exactly the same resample.
/// counts is resized to n. Throws InputError when n == 0.
void bootstrap_counts(std::size_t n, std::uint64_t seed, std::uint64_t b, std::vector<std::uint32_t>& counts);

/// Percentile of sorted data by linear interpolation between order statistics (numpy's default).
double quantile_sorted(const std::vector<double>& sorted, double q);

/// The central `level` percentile interval of resampled values (NaN draws, undefined in a resample,
/// dropped); both ends NaN when no value is left.
Interval percentile_interval(std::vector<double> values, double level);

}  // namespace arcal
