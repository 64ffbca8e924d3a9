// Inner loops of the CEDAR kernels (internal): a vectorisable e^x, score and value-accumulation
// micro-kernels for a tile of W queries (scores: queries held transposed, dim x W, so the inner loop
// runs over W contiguous floats; values: blocks of 4 queries x 64 columns held in registers while the
// keys stream past), and single-query versions for small groups. Plain loops the compiler vectorises.
// Everything is always_inline so each target clone of the caller (kernel.cpp) gets its own ISA.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "core/fast_exp.hpp"

#define ARCAL_CEDAR_INLINE inline __attribute__((always_inline))

namespace arcal::cedar::impl {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// St[j*W + t] = sum_c K[j*ldk + c] * Qt[c*W + t] for keys j < n (Qt: dim x W). J keys per step
/// keep J x W accumulators in registers; every c loads one row of Qt and J key values.
template <int W>
ARCAL_CEDAR_INLINE void tile_scores(const float* __restrict Qt, const float* __restrict K, std::int64_t ldk, int n,
                                    int dim, float* __restrict St) {
  constexpr int J = W >= 32 ? 8 : 16;
  int j = 0;
  for (; j + J <= n; j += J) {
    float a[J][W];
    for (int u = 0; u < J; ++u)
      for (int t = 0; t < W; ++t) a[u][t] = 0.0f;
    const float* k0 = K + j * ldk;
    for (int c = 0; c < dim; ++c) {
      const float* qc = Qt + c * W;
      for (int u = 0; u < J; ++u) {
        const float b = k0[u * ldk + c];
#pragma omp simd
        for (int t = 0; t < W; ++t) a[u][t] += b * qc[t];
      }
    }
    for (int u = 0; u < J; ++u)
      for (int t = 0; t < W; ++t) St[(j + u) * W + t] = a[u][t];
  }
  for (; j < n; ++j) {
    float a[W];
    for (int t = 0; t < W; ++t) a[t] = 0.0f;
    const float* kj = K + j * ldk;
    for (int c = 0; c < dim; ++c) {
      const float b = kj[c];
      const float* qc = Qt + c * W;
#pragma omp simd
      for (int t = 0; t < W; ++t) a[t] += b * qc[t];
    }
    for (int t = 0; t < W; ++t) St[j * W + t] = a[t];
  }
}

/// One register block of tile_accumulate: R query rows x CB value columns [c0, c0 + CB).
template <int W, int R, int CB>
ARCAL_CEDAR_INLINE void accumulate_block(const float* __restrict Pt, const float* __restrict V, std::int64_t ldv, int n,
                                         int t0, int c0, int dim, float* __restrict acc) {
  float a[R][CB];
  for (int u = 0; u < R; ++u)
    for (int c = 0; c < CB; ++c) a[u][c] = 0.0f;
  for (int j = 0; j < n; ++j) {
    const float* vj = V + j * ldv + c0;
    for (int u = 0; u < R; ++u) {
      const float p = Pt[j * W + t0 + u];
#pragma omp simd
      for (int c = 0; c < CB; ++c) a[u][c] += p * vj[c];
    }
  }
  for (int u = 0; u < R; ++u)
    for (int c = 0; c < CB; ++c) acc[(t0 + u) * dim + c0 + c] = a[u][c];
}

/// acc[t*dim + c] = sum_j Pt[j*W + t] * V[j*ldv + c] for rows t < rows (rounded up to 4) and keys
/// j < n (acc: W x dim, overwritten). Blocks of 4 rows x 64 (then 16, then 1) columns stay in
/// registers while the keys stream past.
template <int W>
ARCAL_CEDAR_INLINE void tile_accumulate(const float* __restrict Pt, const float* __restrict V, std::int64_t ldv, int n,
                                        int rows, int dim, float* __restrict acc) {
  for (int t0 = 0; t0 < rows; t0 += 4) {
    int c0 = 0;
    for (; c0 + 64 <= dim; c0 += 64) accumulate_block<W, 4, 64>(Pt, V, ldv, n, t0, c0, dim, acc);
    for (; c0 + 16 <= dim; c0 += 16) accumulate_block<W, 4, 16>(Pt, V, ldv, n, t0, c0, dim, acc);
    for (; c0 < dim; ++c0) accumulate_block<W, 4, 1>(Pt, V, ldv, n, t0, c0, dim, acc);
  }
}

/// s[j] = sum_c q[c] * Kt[c*ldt + j] for keys j < n <= 64 (Kt: a chunk's keys transposed, dim x ldt):
/// one query; the 64 partial sums stay in registers while the rows of Kt stream past.
ARCAL_CEDAR_INLINE void row_scores(const float* __restrict q, const float* __restrict Kt, std::int64_t ldt, int n,
                                   int dim, float* __restrict s) {
  float a[64];
  for (int j = 0; j < 64; ++j) a[j] = 0.0f;
  if (n == 64) {
    for (int c = 0; c < dim; ++c) {
      const float qc = q[c];
      const float* kc = Kt + c * ldt;
#pragma omp simd
      for (int j = 0; j < 64; ++j) a[j] += qc * kc[j];
    }
  } else {
    for (int c = 0; c < dim; ++c) {
      const float qc = q[c];
      const float* kc = Kt + c * ldt;
#pragma omp simd
      for (int j = 0; j < n; ++j) a[j] += qc * kc[j];
    }
  }
  for (int j = 0; j < n; ++j) s[j] = a[j];
}

/// acc[c0 + c] += sum_j p[j] * V[j*ldv + c0 + c] for c < CB: one query, CB accumulators in registers.
template <int CB>
ARCAL_CEDAR_INLINE void row_accumulate_block(const float* __restrict p, const float* __restrict V, std::int64_t ldv,
                                             int n, int c0, float* __restrict acc) {
  float a[CB];
  for (int c = 0; c < CB; ++c) a[c] = acc[c0 + c];
  for (int j = 0; j < n; ++j) {
    const float pj = p[j];
    const float* vj = V + j * ldv + c0;
#pragma omp simd
    for (int c = 0; c < CB; ++c) a[c] += pj * vj[c];
  }
  for (int c = 0; c < CB; ++c) acc[c0 + c] = a[c];
}

/// acc[c] += sum_j p[j] * V[j*ldv + c] for keys j < n: one query.
ARCAL_CEDAR_INLINE void row_accumulate(const float* __restrict p, const float* __restrict V, std::int64_t ldv, int n,
                                       int dim, float* __restrict acc) {
  int c0 = 0;
  for (; c0 + 64 <= dim; c0 += 64) row_accumulate_block<64>(p, V, ldv, n, c0, acc);
  for (; c0 + 16 <= dim; c0 += 16) row_accumulate_block<16>(p, V, ldv, n, c0, acc);
  for (; c0 < dim; ++c0) row_accumulate_block<1>(p, V, ldv, n, c0, acc);
}

}  // namespace arcal::cedar::impl
