#include "ops/topk_summary.hpp"

#include <algorithm>
#include <functional>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fast_exp.hpp"
#include "core/parallel.hpp"

namespace arcal {

namespace {

#ifdef ARCAL_NO_TARGET_CLONES  // ThreadSanitizer builds: an instrumented ifunc resolver runs before TSan's runtime
                               // exists
#define ARCAL_TOPK_CLONES
#else
#define ARCAL_TOPK_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

/// Pass 1's blocks (one block maximum per 16 values) and pass 2's (float sums over 256 values, added in double).
constexpr std::size_t kMaxBlock = 16, kSumBlock = 256;

struct Candidate {
  float value;
  std::int64_t index;
};

/// The order of the top k: larger values first, and of equal values the smaller class (as a stable
/// descending sort).
inline bool stronger(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

/// An int32 whose order is the order of the floats (not NaN): the bits, with the negative ones' magnitude
/// bits flipped.
inline std::int32_t order_key(float f) {
  std::int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i >= 0 ? i : i ^ 0x7fffffff;
}

inline float from_order_key(std::int32_t i) {
  const std::int32_t bits = i >= 0 ? i : i ^ 0x7fffffff;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/// e^x for x in [−88, 0] (e^−88 gives 0): Cephes' expf as core/fast_exp.hpp's exp_nonpos (relative error
/// about 2e-7) without its clamp, with n = rint(x log2 e) (one vroundps): the caller clamps, so the sum
/// loop is half exp_nonpos's instructions.
ARCAL_ALWAYS_INLINE float exp_above_88(float x) {
  const float n = std::rint(x * 1.44269504088896341f);
  return exp_cephes_reduced(x, n, static_cast<std::int32_t>(n));  // n = -127 (x near -88): 0
}

/// A row holding a NaN: every summary NaN, for the caller to refuse.
void nan_row(std::size_t k, std::size_t j, const TopkSummaryOutput& out) {
  const float q = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t r = 0; r < k; ++r) {
    out.topk_logprobs[j * k + r] = q;
    out.topk_indices[j * k + r] = std::int64_t(r);
  }
  out.log_normalizer[j] = out.entropy[j] = out.prob_sq_sum[j] = q;
}

struct RowScratch {
  std::vector<float> block_max;
  std::vector<std::int32_t> key;
  std::vector<Candidate> cand;
};

/// One row. Pass 1: the values fall into nb = ceil(K/16) strided blocks (block b: the values b, b + nb,
/// b + 2nb, ...), whose maxima are 16 vertical vector maxima over the row read as [16, nb] (no horizontal
/// reductions). T0, the k-th largest block maximum, bounds the k-th largest value from below (k blocks
/// hold a value >= T0 each), so every value of the top k lies in a block whose maximum is >= T0: only
/// those blocks (about k) are read again, and their values >= T0 are the candidates, cut to the k
/// strongest. Pass 2 sums e^{d}, e^{d} d and e^{2d} (d = z − m).
ARCAL_TOPK_CLONES void summarise_row(const float* z, std::size_t K, std::size_t k, std::size_t j,
                                     const TopkSummaryOutput& out, RowScratch& w) {
  const std::size_t nb = (K + kMaxBlock - 1) / kMaxBlock;
  w.block_max.assign(z, z + nb);
  float* bm = w.block_max.data();
  std::int32_t nans = 0;
  for (std::size_t r = 1; r * nb < K; ++r) {
    const float* x = z + r * nb;
    const std::size_t n = std::min(nb, K - r * nb);
#pragma omp simd reduction(+ : nans)
    for (std::size_t i = 0; i < n; ++i) {
      nans += x[i] != x[i] ? 1 : 0;
      bm[i] = x[i] > bm[i] ? x[i] : bm[i];  // maxps's form (std::max stays scalar)
    }
  }
  for (std::size_t i = 0; i < nb; ++i)  // row 0 (a NaN there would hide its block)
    nans += bm[i] != bm[i] ? 1 : 0;
  if (nans > 0) {
    nan_row(k, j, out);
    return;
  }
  // T0 = the k-th largest block maximum, by bisection on the floats' order-preserving integer keys with
  // vectorised counts (nth_element's branches cost three times the rest of pass 1).
  auto& key = w.key;
  key.resize(nb);
  std::int32_t lo = std::numeric_limits<std::int32_t>::max(), hi = std::numeric_limits<std::int32_t>::min();
  for (std::size_t i = 0; i < nb; ++i) {
    key[i] = order_key(bm[i]);
    lo = std::min(lo, key[i]);
    hi = std::max(hi, key[i]);
  }
  // With k > nb blocks the bound does not hold (k blocks do not exist): every value is a candidate.
  if (k > nb) lo = order_key(-std::numeric_limits<float>::infinity());
  const std::size_t need = std::min(k, nb);
  // Invariant: count(key >= lo) >= need; count(key >= hi + 1) < need. Find the largest such lo.
  while (k <= nb && lo < hi) {
    const auto mid = std::int32_t(lo + (std::int64_t(hi) - lo + 1) / 2);
    std::int32_t count = 0;  // (int32 like the keys, so the loop vectorises)
    const std::int32_t* kp = key.data();
#pragma omp simd reduction(+ : count)
    for (std::size_t i = 0; i < nb; ++i) count += kp[i] >= mid ? 1 : 0;
    if (std::size_t(count) >= need)
      lo = mid;
    else
      hi = mid - 1;
  }
  const float t0 = from_order_key(lo);
  // Candidates: every value >= T0 of the blocks whose maximum is >= T0, written without a branch.
  std::size_t blocks = 0;
  for (std::size_t i = 0; i < nb; ++i) blocks += key[i] >= lo ? 1 : 0;
  auto& cand = w.cand;
  cand.resize(blocks * kMaxBlock);
  std::size_t count = 0;
  for (std::size_t b = 0; b < nb; ++b) {
    if (key[b] < lo) continue;
    for (std::size_t i = b; i < K; i += nb) {
      cand[count] = {z[i], std::int64_t(i)};
      count += z[i] >= t0 ? 1 : 0;
    }
  }
  cand.resize(count);
  const auto order = [](const Candidate& a, const Candidate& b) { return stronger(a, b); };
  std::sort(cand.begin(), cand.end(), order);  // about k of them
  const float m = cand[0].value;
  double lz, entropy, sq;
  if (!std::isfinite(m)) {  // +inf, or every class at -inf: no softmax exists
    lz = m;
    entropy = sq = std::numeric_limits<double>::quiet_NaN();
  } else {
    double S = 0, T = 0, Q = 0;
    for (std::size_t b = 0; b < K; b += kSumBlock) {
      const std::size_t n = std::min(kSumBlock, K - b);
      const float* x = z + b;
      float s = 0, u = 0, q = 0;
#pragma omp simd reduction(+ : s, u, q)
      for (std::size_t i = 0; i < n; ++i) {
        float d = x[i] - m;
        d = d > -88.0f ? d : -88.0f;  // e^d = 0 below, and a class at -inf adds 0, not 0 * (-inf)
        const float e = exp_above_88(d);
        s += e;
        u += e * d;
        q += e * e;
      }
      S += double(s);
      T += double(u);
      Q += double(q);
    }
    const double log_s = std::log(S);
    lz = double(m) + log_s;
    entropy = std::max(0.0, log_s - T / S);
    sq = Q / (S * S);
  }
  for (std::size_t r = 0; r < k; ++r) {
    out.topk_logprobs[j * k + r] = float(double(cand[r].value) - lz);
    out.topk_indices[j * k + r] = cand[r].index;
  }
  out.log_normalizer[j] = float(lz);
  out.entropy[j] = float(entropy);
  out.prob_sq_sum[j] = float(sq);
}

}  // namespace

void softmax_topk_summaries(const float* logits, std::size_t classes, std::size_t row_stride,
                            const std::int64_t* row_index, std::size_t rows, std::size_t k,
                            const TopkSummaryOutput& out, int threads) {
  if (rows == 0) return;
  // Rows in chunks of 64, one candidate buffer per job.
  constexpr std::size_t kRowsPerJob = 64;
  const std::size_t jobs = (rows + kRowsPerJob - 1) / kRowsPerJob;
  parallel_for_index(jobs, threads, [&](std::size_t job) {
    RowScratch scratch;
    const std::size_t end = std::min(rows, (job + 1) * kRowsPerJob);
    for (std::size_t j = job * kRowsPerJob; j < end; ++j) {
      const std::size_t r = row_index ? std::size_t(row_index[j]) : j;
      summarise_row(logits + r * row_stride, classes, k, j, out, scratch);
    }
  });
}

}  // namespace arcal
