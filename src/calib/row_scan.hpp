// The one scan of an [N, K] probability matrix behind the calibration metrics (calib/metrics.cpp):
// validation with the first bad value named, top label, per-example NLL and Brier terms, and the
// classwise ECE's cells, rows in file order, in chunks over threads (results independent of the
// thread count). Internal to src/calib; doubles in, doubles out.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "calib/binning.hpp"
#include "core/span.hpp"

namespace arcal::metrics_detail {

/// Probabilities below this count as this in log terms (NLL of a zero probability is finite).
inline constexpr double kProbFloor = 1e-15;

/// N > 0, K >= 2, probs of N*K values and N labels in [0, K); InputError naming `fn` otherwise.
void check_shape(const char* fn, Span<double> probs, std::size_t n, std::size_t k, Span<std::int64_t> labels);

/// A row with a value outside [0, 1] or NaN: finds it and throws with its flat index (the slow path of
/// the fused scans, which only accumulate a flag). With row_sum_tolerance > 0 a row whose values are
/// all in [0, 1] fails when its sum is off by more.
[[noreturn]] void throw_bad_row(const char* fn, const double* row, std::size_t i, std::size_t k,
                                double row_sum_tolerance = 0.0);

/// Vectorisable validity test of one row: true when every value is in [0, 1] (NaN fails).
inline bool row_valid(const double* row, std::size_t k) {
  unsigned bad = 0;
  for (std::size_t kk = 0; kk < k; ++kk) bad |= static_cast<unsigned>(!((row[kk] >= 0.0) & (row[kk] <= 1.0)));
  return bad == 0;
}

/// The bins + 1 edges b / bins of equal-width bins on [0, 1].
std::vector<double> bin_edges(int bins);

// ---- Classwise cells. Classwise ECE needs, per class k and equal-width bin b, the count, the sum of
// p_ik and the number of labels k in the cell. With K classes most p_ik fall in bin 0, so bin 0 is
// accumulated densely (a branch-free, vectorised loop over the row) and only p_ik >= 1/B take the
// scattered path.
struct ClasswiseCells {
  std::size_t K = 0, B = 0;
  std::vector<double> edges;        // [B+1]
  double bin0_limit = 0;            // p < bin0_limit is bin 0: edges[1], or +inf when B = 1
  std::vector<double> c0, s0;       // [K] bin-0 weight and sum of p
  std::vector<double> cnt, sc, sa;  // [K*B]; bin 0 of cnt/sc is merged in from c0/s0 by finish()
  double total = 0;

  ClasswiseCells(std::size_t k, int bins)
      : K(k),
        B(static_cast<std::size_t>(bins)),
        edges(bin_edges(bins)),
        c0(k, 0.0),
        s0(k, 0.0),
        cnt(k * B, 0.0),
        sc(k * B, 0.0),
        sa(k * B, 0.0) {
    bin0_limit = B > 1 ? edges[1] : std::numeric_limits<double>::infinity();
  }

  // One validated row with weight w (1 for the point estimate, a resample multiplicity otherwise).
  void add(const double* row, std::size_t y, double w) {
    const double e1 = bin0_limit;
    double* c0p = c0.data();
    double* s0p = s0.data();
    for (std::size_t kk = 0; kk < K; ++kk) {
      const double m = row[kk] < e1 ? w : 0.0;  // adding 0 * p (p finite) leaves the sums unchanged
      c0p[kk] += m;
      s0p[kk] += m * row[kk];
    }
    add_sparse(row, y, w);
  }

  // The cells with p_ik >= 1/B and the label's cell (the bin-0 part done by the caller).
  void add_sparse(const double* row, std::size_t y, double w) {
    const double e1 = bin0_limit;
    const int bins = static_cast<int>(B);
    total += w;
    for (std::size_t kk = 0; kk < K; ++kk)
      if (!(row[kk] < e1)) {
        const std::size_t cell = kk * B + static_cast<std::size_t>(equal_width_bin(row[kk], bins, edges.data()));
        cnt[cell] += w;
        sc[cell] += w * row[kk];
      }
    sa[y * B + static_cast<std::size_t>(equal_width_bin(row[y], bins, edges.data()))] += w;
  }

  // Adds another accumulator's sums (same K and B) to these.
  void merge(const ClasswiseCells& o) {
    for (std::size_t kk = 0; kk < K; ++kk) {
      c0[kk] += o.c0[kk];
      s0[kk] += o.s0[kk];
    }
    for (std::size_t c = 0; c < K * B; ++c) {
      cnt[c] += o.cnt[c];
      sc[c] += o.sc[c];
      sa[c] += o.sa[c];
    }
    total += o.total;
  }

  // (1/K) sum_k sum_b (n_kb/N) |acc_kb - conf_kb| = (1/K) sum over cells |sum a - sum p| / N.
  double finish() {
    for (std::size_t kk = 0; kk < K; ++kk) {
      cnt[kk * B] += c0[kk];
      sc[kk * B] += s0[kk];
    }
    double sum = 0;
    for (std::size_t c = 0; c < K * B; ++c)
      if (cnt[c] > 0) sum += std::fabs(sa[c] - sc[c]);
    return sum / total / static_cast<double>(K);
  }
};

// ---- The one scan of the [N, K] matrix, rows in file order: validation, top label, per-example NLL
// and Brier terms, and (optionally) the classwise cells. Labels are checked before the scan.
struct RowScan {
  std::vector<double> conf, correct, nll, brier;  // [N], file order
  std::vector<int> prediction;                    // [N] when asked for
};

/// Scans rows [0, n) into `out` (and `cw` when given); throws for the first invalid row in file order.
void scan_rows(const char* fn, Span<double> probs, std::size_t n, std::size_t k, Span<std::int64_t> labels,
               RowScan& out, ClasswiseCells* cw, bool want_prediction, double row_sum_tolerance = 0.0);

}  // namespace arcal::metrics_detail
