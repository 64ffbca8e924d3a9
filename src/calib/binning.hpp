// Confidence binning for calibration metrics (method.md §4): equal-width bins with interior edges
// belonging to the upper bin, and equal-mass bins over sorted ranks where tied values never straddle
// a boundary. Also the per-bin reliability table (n, mean confidence, mean target) and the
// consistency band of a reliability diagram.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace arcal {

/// How confidences are binned: equal-width edges k/B, or equal-mass groups of sorted ranks.
enum class BinScheme { equal_width, equal_mass };

/// Equal-width bin of c in [0, 1]: bin k holds k/B <= c < (k+1)/B (edges k/B as doubles); c = 1 goes
/// to bin B-1. Values outside [0, 1] are clamped to the end bins (callers validate first).
inline int equal_width_bin(double c, int bins) {
  int b = static_cast<int>(c * bins);
  if (b >= bins) b = bins - 1;
  if (b < 0) b = 0;
  // c*B can round across an edge; compare against the edge itself so the convention is exact.
  if (b + 1 < bins && c >= static_cast<double>(b + 1) / bins)
    ++b;
  else if (b > 0 && c < static_cast<double>(b) / bins)
    --b;
  return b;
}

/// The same with precomputed edges[b] = b / bins (b = 0..bins): no division in hot loops.
inline int equal_width_bin(double c, int bins, const double* edges) {
  int b = static_cast<int>(c * bins);
  if (b >= bins) b = bins - 1;
  if (b < 0) b = 0;
  if (b + 1 < bins && c >= edges[b + 1])
    ++b;
  else if (b > 0 && c < edges[b])
    --b;
  return b;
}

/// Group (0-based) of 0-based rank r when `total` ranks are split into `bins` nearly equal groups,
/// the first total % bins groups one larger.
inline std::size_t nominal_group(std::uint64_t r, std::uint64_t total, std::uint64_t bins) {
  const std::uint64_t q = total / bins, rem = total % bins;
  if (r < rem * (q + 1)) return static_cast<std::size_t>(r / (q + 1));
  return static_cast<std::size_t>(rem + (r - rem * (q + 1)) / q);
}

/// Equal-width bin per example, [N] -> [N] in [0, B). Throws InputError when bins < 1 or a value is
/// outside [0, 1] or NaN.
std::vector<int> equal_width_bins(const std::vector<double>& conf, int bins);

/// Equal-mass bins, [N] -> [N] in [0, B): sort by value (stable), ranks split by nominal_group; a run
/// of tied values takes the group of its first (lowest) rank, so later groups may come out smaller
/// or empty. Throws InputError like equal_width_bins.
std::vector<int> equal_mass_bins(const std::vector<double>& conf, int bins);

struct BinRow {
  std::size_t n = 0;       ///< examples in the bin (0 for an empty bin)
  double mean_conf = 0.0;  ///< mean confidence (0 when empty)
  double accuracy = 0.0;   ///< mean target (0 when empty)
};

/// Per-bin table from an assignment: conf, target [N] (target in [0, 1], usually 0/1), assign [N]
/// in [0, B). Returns B rows. Throws InputError on size mismatch or out-of-range assignment.
std::vector<BinRow> bin_table(const std::vector<double>& conf, const std::vector<double>& target,
                              const std::vector<int>& assign, int bins);

/// Consistency band of one reliability-diagram bin (relplot / Bröcker & Smith 2007): the central
/// `level` interval of the accuracy a perfectly calibrated model would show in a bin of n examples with
/// mean confidence c, i.e. of Binomial(n, c) / n (exact quantiles, summed in log space, O(n)). Examples
/// with different confidences inside the bin make the count Poisson-binomial, whose variance is smaller,
/// so the band is conservative. Returns {low, high} in [0, 1]; n = 0 or c outside [0, 1] gives {NaN, NaN}.
struct AccuracyBand {
  double low, high;
};
AccuracyBand calibrated_accuracy_band(std::size_t n, double c, double level = 0.95);

}  // namespace arcal
