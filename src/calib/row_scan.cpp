#include "calib/row_scan.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

#include "core/check.hpp"

namespace arcal::metrics_detail {

void check_shape(const char* fn, Span<double> probs, std::size_t n, std::size_t k, Span<std::int64_t> labels) {
  if (n == 0) throw_input(fn, "no examples (N = 0)");
  if (k < 2) throw_input(fn, "K is " + std::to_string(k) + ", but must be >= 2");
  check_same_size(fn, "probs", probs.size(), "N*K", n * k);
  check_same_size(fn, "labels", labels.size(), "N", n);
  for (std::size_t i = 0; i < n; ++i) check_label(fn, "labels", i, labels[i], static_cast<long long>(k));
}

// A row with a value outside [0, 1] or NaN: find it and throw with its flat index (the slow path of the
// fused scans, which only accumulate a flag).
// With row_sum_tolerance > 0 a row whose values are all in [0, 1] fails when its sum is off by more.
[[noreturn]] void throw_bad_row(const char* fn, const double* row, std::size_t i, std::size_t k,
                                double row_sum_tolerance) {
  double sum = 0.0;
  for (std::size_t kk = 0; kk < k; ++kk) {
    check_probability(fn, "probs", i * k + kk, row[kk]);
    sum += row[kk];
  }
  // The scan flagged this row; its vectorised sum may differ from this one in the last bits, so a row
  // at the tolerance's edge is still reported (never an internal error).
  if (row_sum_tolerance > 0) {
    std::ostringstream msg;
    msg.precision(9);
    msg << "probs row " << i << " sums to " << sum << ", but must sum to 1 (within " << row_sum_tolerance << ")";
    throw_input(fn, msg.str());
  }
  ARCAL_ASSERT(false, "throw_bad_row called on a valid row");
  std::abort();
}

std::vector<double> bin_edges(int bins) {
  std::vector<double> e(static_cast<std::size_t>(bins) + 1);
  for (int b = 0; b <= bins; ++b) e[static_cast<std::size_t>(b)] = static_cast<double>(b) / bins;
  return e;
}

namespace {

// Rows [begin, end) of the scan; returns the first invalid row, or end when all are valid (the caller
// throws, so a worker thread never does). On x86-64 an AVX2 clone is chosen at load time where the CPU
// has it (NumPy dispatches the same way).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#ifndef ARCAL_NO_TARGET_CLONES  // ThreadSanitizer builds: an instrumented ifunc resolver runs before TSan's runtime
                                // exists
__attribute__((target_clones("avx2", "default")))
#endif
#endif
std::size_t
scan_range(const double* probs, std::size_t k, const std::int64_t* labels, std::size_t begin, std::size_t end,
           RowScan& out, ClasswiseCells* cw, bool want_prediction, double row_sum_tolerance) {
  for (std::size_t i = begin; i < end; ++i) {
    const double* row = &probs[i * k];
    const std::size_t y = static_cast<std::size_t>(labels[i]);
    // One vectorised pass over the row: validity flag, maximum, sum of squares and (with classwise
    // cells) the bin-0 sums; then the first index of the maximum (ties: lowest index, as argmax).
    unsigned bad = 0;
    double mx = 0.0, q = 0.0, sum = 0.0;
    if (cw) {
      const double e1 = cw->bin0_limit;
      double* c0p = cw->c0.data();
      double* s0p = cw->s0.data();
#pragma omp simd reduction(| : bad) reduction(max : mx) reduction(+ : q, sum)
      for (std::size_t kk = 0; kk < k; ++kk) {
        const double x = row[kk];
        bad |= static_cast<unsigned>(!((x >= 0.0) & (x <= 1.0)));
        mx = x > mx ? x : mx;
        q += x * x;
        sum += x;
        const double m = x < e1 ? 1.0 : 0.0;  // adding 0 * p (p finite) leaves the sums unchanged
        c0p[kk] += m;
        s0p[kk] += m * x;
      }
    } else {
#pragma omp simd reduction(| : bad) reduction(max : mx) reduction(+ : q, sum)
      for (std::size_t kk = 0; kk < k; ++kk) {
        const double x = row[kk];
        bad |= static_cast<unsigned>(!((x >= 0.0) & (x <= 1.0)));
        mx = x > mx ? x : mx;
        q += x * x;
        sum += x;
      }
    }
    if (bad || (row_sum_tolerance > 0 && !(std::fabs(sum - 1.0) <= row_sum_tolerance))) return i;
    // The prediction is the first index holding the maximum; it is correct only if p_y is the maximum,
    // so the index is searched for only then (or when the caller wants predictions).
    const double py = row[y];
    bool correct = false;
    if (py == mx || want_prediction) {
      std::size_t best = 0;
      while (row[best] != mx) ++best;
      correct = best == y;
      if (want_prediction) out.prediction[i] = static_cast<int>(best);
    }
    out.conf[i] = mx;
    out.correct[i] = correct ? 1.0 : 0.0;
    out.nll[i] = -std::log(std::max(py, kProbFloor));
    // sum_k (p_k - 1[k = y])^2 = sum_k p_k^2 - p_y^2 + (p_y - 1)^2
    out.brier[i] = q - py * py + (py - 1.0) * (py - 1.0);
    if (cw) cw->add_sparse(row, y, 1.0);
  }
  return end;
}

// Rows per chunk of the scan. The classwise sums are accumulated per chunk and the chunks' sums added
// in chunk order, so every result is the same for any number of threads (per-row outputs are written
// in place and need no combining).
constexpr std::size_t kScanChunkRows = std::size_t{1} << 15;
// Below this many matrix values the scan runs on the calling thread only (thread start-up would cost
// more than it saves).
constexpr std::size_t kScanThreadMinValues = std::size_t{1} << 22;

// Threads of the row scan: the hardware's, at most one per chunk (1 below kScanThreadMinValues).
std::size_t scan_threads(std::size_t n, std::size_t k) {
  if (n * k < kScanThreadMinValues) return 1;
  const std::size_t chunks = (n + kScanChunkRows - 1) / kScanChunkRows;
  return std::max<std::size_t>(1, std::min<std::size_t>(std::thread::hardware_concurrency(), chunks));
}

}  // namespace

void scan_rows(const char* fn, Span<double> probs, std::size_t n, std::size_t k, Span<std::int64_t> labels,
               RowScan& out, ClasswiseCells* cw, bool want_prediction, double row_sum_tolerance) {
  check_shape(fn, probs, n, k, labels);
  out.conf.resize(n);
  out.correct.resize(n);
  out.nll.resize(n);
  out.brier.resize(n);
  if (want_prediction) out.prediction.resize(n);
  const std::size_t chunks = (n + kScanChunkRows - 1) / kScanChunkRows;
  std::vector<ClasswiseCells> parts;
  if (cw) parts.assign(chunks, ClasswiseCells(cw->K, static_cast<int>(cw->B)));
  std::vector<std::size_t> first_bad(chunks);
  auto run_chunk = [&](std::size_t c) {
    const std::size_t begin = c * kScanChunkRows, end = std::min(n, begin + kScanChunkRows);
    const std::size_t b = scan_range(probs.data(), k, labels.data(), begin, end, out, cw ? &parts[c] : nullptr,
                                     want_prediction, row_sum_tolerance);
    first_bad[c] = b < end ? b : n;
  };
  const std::size_t threads = scan_threads(n, k);
  if (threads <= 1) {
    for (std::size_t c = 0; c < chunks; ++c) run_chunk(c);
  } else {
    std::atomic<std::size_t> next{0};
    auto worker = [&] {
      for (std::size_t c; (c = next.fetch_add(1)) < chunks;) run_chunk(c);
    };
    std::vector<std::thread> pool;
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
  }
  for (std::size_t c = 0; c < chunks; ++c)
    if (first_bad[c] < n) throw_bad_row(fn, &probs[first_bad[c] * k], first_bad[c], k, row_sum_tolerance);
  if (cw)
    for (const auto& part : parts) cw->merge(part);
}

}  // namespace arcal::metrics_detail
