// Inner loops of the CEDAR kernels (internal): a vectorisable e^x, score and value-accumulation
// micro-kernels for a tile of W queries held transposed (dim x W, so every inner loop runs over W
// contiguous floats and the compiler vectorises it), and single-query versions for small groups.
// Everything is always_inline so each target clone of the caller (kernel.cpp) gets its own ISA.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#define ARCAL_CEDAR_INLINE inline __attribute__((always_inline))

namespace arcal::cedar::impl {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// e^x for x <= 0 (x = -inf, or below -87, gives exactly 0). Cephes' expf: x = n ln2 + r with
/// |r| <= ln2 / 2, a degree-6 polynomial for e^r, 2^n from the exponent bits; relative error about
/// 2e-7. Branch-free, so loops over it vectorise.
ARCAL_CEDAR_INLINE float exp_nonpos(float x) {
  const bool tiny = x < -87.0f;
  x = tiny ? -87.0f : x;
  const float fx = x * 1.44269504088896341f + 0.5f;
  int n = static_cast<int>(fx);
  n -= static_cast<int>(static_cast<float>(n) > fx);  // floor (truncation rounds negatives up)
  const float nf = static_cast<float>(n);
  float r = x - nf * 0.693359375f;
  r = r + nf * 2.12194440e-4f;
  const float r2 = r * r;
  float y = 1.9875691500E-4f;
  y = y * r + 1.3981999507E-3f;
  y = y * r + 8.3334519073E-3f;
  y = y * r + 4.1665795894E-2f;
  y = y * r + 1.6666665459E-1f;
  y = y * r + 5.0000001201E-1f;
  y = y * r2 + r + 1.0f;
  const std::int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return tiny ? 0.0f : y * scale;
}

/// St[j*W + t] = sum_c K[j*ldk + c] * Qt[c*W + t] for keys j < n (Qt: dim x W).
template <int W>
ARCAL_CEDAR_INLINE void tile_scores(const float* __restrict Qt, const float* __restrict K, std::int64_t ldk, int n,
                                    int dim, float* __restrict St) {
  constexpr int J = W >= 32 ? 4 : 8;  // keys per step: J * W accumulators stay in registers
  int j = 0;
  for (; j + J <= n; j += J) {
    float a[J][W];
    for (int u = 0; u < J; ++u)
      for (int t = 0; t < W; ++t) a[u][t] = 0.0f;
    const float* k0 = K + j * ldk;
    for (int c = 0; c < dim; ++c) {
      const float* qc = Qt + c * W;
      float b[J];
      for (int u = 0; u < J; ++u) b[u] = k0[u * ldk + c];
      for (int u = 0; u < J; ++u) {
#pragma omp simd
        for (int t = 0; t < W; ++t) a[u][t] += b[u] * qc[t];
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

/// acct[c*W + t] += sum_j Pt[j*W + t] * V[j*ldv + c] for keys j < n (acct: dim x W).
template <int W>
ARCAL_CEDAR_INLINE void tile_accumulate(const float* __restrict Pt, const float* __restrict V, std::int64_t ldv, int n,
                                        int dim, float* __restrict acct) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* p0 = Pt + j * W;
    const float* v0 = V + j * ldv;
    for (int c = 0; c < dim; ++c) {
      float* ac = acct + c * W;
      const float b0 = v0[c], b1 = v0[ldv + c], b2 = v0[2 * ldv + c], b3 = v0[3 * ldv + c];
#pragma omp simd
      for (int t = 0; t < W; ++t) ac[t] += b0 * p0[t] + b1 * p0[W + t] + b2 * p0[2 * W + t] + b3 * p0[3 * W + t];
    }
  }
  for (; j < n; ++j) {
    const float* pj = Pt + j * W;
    const float* vj = V + j * ldv;
    for (int c = 0; c < dim; ++c) {
      float* ac = acct + c * W;
      const float b = vj[c];
#pragma omp simd
      for (int t = 0; t < W; ++t) ac[t] += b * pj[t];
    }
  }
}

/// s[j] = q . K[j*ldk ...] for keys j < n: one query, four keys per pass.
ARCAL_CEDAR_INLINE void row_scores(const float* __restrict q, const float* __restrict K, std::int64_t ldk, int n,
                                   int dim, float* __restrict s) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* k0 = K + j * ldk;
    const float* k1 = k0 + ldk;
    const float* k2 = k1 + ldk;
    const float* k3 = k2 + ldk;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (int c = 0; c < dim; ++c) {
      s0 += q[c] * k0[c];
      s1 += q[c] * k1[c];
      s2 += q[c] * k2[c];
      s3 += q[c] * k3[c];
    }
    s[j] = s0;
    s[j + 1] = s1;
    s[j + 2] = s2;
    s[j + 3] = s3;
  }
  for (; j < n; ++j) {
    const float* kj = K + j * ldk;
    float s0 = 0.0f;
#pragma omp simd reduction(+ : s0)
    for (int c = 0; c < dim; ++c) s0 += q[c] * kj[c];
    s[j] = s0;
  }
}

/// acc[c] += sum_j p[j] * V[j*ldv + c] for keys j < n: one query.
ARCAL_CEDAR_INLINE void row_accumulate(const float* __restrict p, const float* __restrict V, std::int64_t ldv, int n,
                                       int dim, float* __restrict acc) {
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* v0 = V + j * ldv;
    const float b0 = p[j], b1 = p[j + 1], b2 = p[j + 2], b3 = p[j + 3];
#pragma omp simd
    for (int c = 0; c < dim; ++c) acc[c] += b0 * v0[c] + b1 * v0[ldv + c] + b2 * v0[2 * ldv + c] + b3 * v0[3 * ldv + c];
  }
  for (; j < n; ++j) {
    const float* vj = V + j * ldv;
    const float b = p[j];
#pragma omp simd
    for (int c = 0; c < dim; ++c) acc[c] += b * vj[c];
  }
}

}  // namespace arcal::cedar::impl
