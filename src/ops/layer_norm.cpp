#include "ops/layer_norm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/fast_exp.hpp"
#include "ops/fused_lanes.hpp"

namespace arcal::fused {

// ---- LayerNorm over the last axis ---------------------------------------------------------------
// y = (x - mean) rstd w + b for each row of d values, rstd = 1 / sqrt(var + eps) with the biased
// variance (two passes over the row). Backward, with xhat = (x - mean) rstd and g = dy w:
// dx = rstd (g - mean(g) - xhat mean(g xhat)), dw = sum over rows of dy xhat, db = sum of dy. The
// row sums go by blocks of kNormBlock rows whose partial sums are added in block order, so the
// gradients are the same on any thread count. LibTorch's layer_norm took 0.42 ms forward + backward
// at (2176, 64), 13 calls per AR-ViT-tiny step.

// y's storage Y may be bf16 (a norm whose output feeds a linear under autocast): computed in T and
// rounded by store, as autocast's cast of a float output would round it; dy (backward) likewise.
// In float with d a multiple of 16, rows go 8 at a time: each row's mean and variance are summed in
// 16 lanes, and the lanes added by lane_totals8, the order of the one-row loops' vectorised
// reductions in the AVX-512 clone (bitwise there); the rows' 16 dependent scalar additions per sum,
// most of a row's time at d = 64, become one transpose and 16 vector additions per 8 rows.
template <typename T, typename Y>
ARCAL_ALWAYS_INLINE void layer_norm_finish_row(const T* __restrict xr, const T* __restrict w, const T* __restrict b,
                                               std::int64_t d, T m, T rs, Y* __restrict yr) {
#pragma omp simd
  for (std::int64_t j = 0; j < d; ++j) store(yr[j], (xr[j] - m) * rs * w[j] + b[j]);
}
// One row's 16 lane sums (lanes 0-7 in lo, 8-15 in hi) of x_c, or with kSquares of (x_c - m)^2.
template <bool kSquares>
ARCAL_ALWAYS_INLINE void row_lane_moment(const float* __restrict xr, std::int64_t d, float m, LaneVec& lo,
                                         LaneVec& hi) {
  LaneVec p = {}, q = {};
  for (std::int64_t c = 0; c < d; c += 16) {
    LaneVec x0, x1;
    lane_load8(xr + c, x0);
    lane_load8(xr + c + 8, x1);
    if constexpr (kSquares) {
      x0 -= m;
      x1 -= m;
      p += x0 * x0;
      q += x1 * x1;
    } else {
      p += x0;
      q += x1;
    }
  }
  lo = p, hi = q;
}
template <typename Y>
ARCAL_ALWAYS_INLINE void layer_norm_rows8(const float* __restrict x, const float* __restrict w,
                                          const float* __restrict b, std::int64_t r, std::int64_t d, float eps,
                                          Y* __restrict y, float* __restrict mean, float* __restrict rstd) {
  LaneVec lo[8], hi[8];
  float m[8], v[8];
  for (int k = 0; k < 8; ++k) row_lane_moment<false>(x + (r + k) * d, d, 0.0f, lo[k], hi[k]);
  lane_totals8(lo, hi, m);
  for (int k = 0; k < 8; ++k) {
    m[k] = m[k] / float(d);
    row_lane_moment<true>(x + (r + k) * d, d, m[k], lo[k], hi[k]);
  }
  lane_totals8(lo, hi, v);
  for (int k = 0; k < 8; ++k) {
    const float rs = 1.0f / std::sqrt(v[k] / float(d) + eps);
    layer_norm_finish_row(x + (r + k) * d, w, b, d, m[k], rs, y + (r + k) * d);
    mean[r + k] = m[k];
    rstd[r + k] = rs;
  }
}
template <typename T, typename Y>
ARCAL_ALWAYS_INLINE void layer_norm_rows(const T* __restrict x, const T* __restrict w, const T* __restrict b,
                                         std::int64_t r0, std::int64_t r1, std::int64_t d, T eps, Y* __restrict y,
                                         T* __restrict mean, T* __restrict rstd) {
  std::int64_t r = r0;
  if constexpr (std::is_same_v<T, float>)
    if (rows_by_eight(d))
      for (; r + 8 <= r1; r += 8) layer_norm_rows8(x, w, b, r, d, eps, y, mean, rstd);
  for (; r < r1; ++r) {
    const T* xr = x + r * d;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (std::int64_t j = 0; j < d; ++j) s += xr[j];
    const T m = s / T(d);
    T v = 0;
#pragma omp simd reduction(+ : v)
    for (std::int64_t j = 0; j < d; ++j) v += (xr[j] - m) * (xr[j] - m);
    const T rs = T(1) / std::sqrt(v / T(d) + eps);
    layer_norm_finish_row(xr, w, b, d, m, rs, y + r * d);
    mean[r] = m;
    rstd[r] = rs;
  }
}

// Rows r0..r1: dx, and the rows' sums of dy xhat and dy added into dw_part and db_part (d each), the
// rows in order. Float rows with d a multiple of 16 go 8 at a time, as in the forward pass.
template <typename T, typename G>
ARCAL_ALWAYS_INLINE void layer_norm_dx_row(const T* __restrict xr, const T* __restrict w, const G* __restrict gr,
                                           std::int64_t d, T m, T rs, T a, T c, T* __restrict dr) {
#pragma omp simd
  for (std::int64_t j = 0; j < d; ++j) dr[j] = rs * (widen(gr[j]) * w[j] - a - (xr[j] - m) * rs * c);
}
template <typename G>
ARCAL_ALWAYS_INLINE void layer_norm_backward_rows8(const float* __restrict x, const float* __restrict w,
                                                   const G* __restrict dy, const float* __restrict mean,
                                                   const float* __restrict rstd, std::int64_t r, std::int64_t d,
                                                   float* __restrict dx, float* __restrict dw_part,
                                                   float* __restrict db_part) {
  LaneVec sg_lo[8], sg_hi[8], sgx_lo[8], sgx_hi[8];
  for (int k = 0; k < 8; ++k) {
    const float* xr = x + (r + k) * d;
    const G* gr = dy + (r + k) * d;
    const float m = mean[r + k], rs = rstd[r + k];
    LaneVec sg[2] = {}, sgx[2] = {};
    for (std::int64_t c = 0; c < d; c += 16)
      for (int h = 0; h < 2; ++h) {
        LaneVec gj, xv, wv, dw, db;
        lane_load8(gr + c + 8 * h, gj);
        lane_load8(xr + c + 8 * h, xv);
        lane_load8(w + c + 8 * h, wv);
        lane_load8(dw_part + c + 8 * h, dw);
        lane_load8(db_part + c + 8 * h, db);
        const LaneVec xh = (xv - m) * rs, g = gj * wv;
        sg[h] += g;
        sgx[h] += g * xh;
        dw += gj * xh;
        db += gj;
        lane_store8(dw_part + c + 8 * h, dw);
        lane_store8(db_part + c + 8 * h, db);
      }
    sg_lo[k] = sg[0], sg_hi[k] = sg[1], sgx_lo[k] = sgx[0], sgx_hi[k] = sgx[1];
  }
  float sg[8], sgx[8];
  lane_totals8(sg_lo, sg_hi, sg);
  lane_totals8(sgx_lo, sgx_hi, sgx);
  for (int k = 0; k < 8; ++k)
    layer_norm_dx_row(x + (r + k) * d, w, dy + (r + k) * d, d, mean[r + k], rstd[r + k], sg[k] / float(d),
                      sgx[k] / float(d), dx + (r + k) * d);
}
template <typename T, typename G>
ARCAL_ALWAYS_INLINE void layer_norm_backward_rows(const T* __restrict x, const T* __restrict w, const G* __restrict dy,
                                                  const T* __restrict mean, const T* __restrict rstd, std::int64_t r0,
                                                  std::int64_t r1, std::int64_t d, T* __restrict dx,
                                                  T* __restrict dw_part, T* __restrict db_part) {
  std::int64_t r = r0;
  if constexpr (std::is_same_v<T, float>)
    if (rows_by_eight(d))
      for (; r + 8 <= r1; r += 8) layer_norm_backward_rows8(x, w, dy, mean, rstd, r, d, dx, dw_part, db_part);
  for (; r < r1; ++r) {
    const T* xr = x + r * d;
    const G* gr = dy + r * d;
    const T m = mean[r], rs = rstd[r];
    T sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
    for (std::int64_t j = 0; j < d; ++j) {
      const T gj = widen(gr[j]);
      const T xh = (xr[j] - m) * rs, g = gj * w[j];
      sg += g;
      sgx += g * xh;
      dw_part[j] += gj * xh;
      db_part[j] += gj;
    }
    layer_norm_dx_row(xr, w, gr, d, m, rs, sg / T(d), sgx / T(d), dx + r * d);
  }
}

// One clone set per dtype (overloads: target_clones takes no templates).
ARCAL_FUSED_CLONES void layer_norm_kernel(const float* x, const float* w, const float* b, std::int64_t r0,
                                          std::int64_t r1, std::int64_t d, float eps, float* y, float* mean,
                                          float* rstd) {
  layer_norm_rows(x, w, b, r0, r1, d, eps, y, mean, rstd);
}
ARCAL_FUSED_CLONES void layer_norm_kernel(const double* x, const double* w, const double* b, std::int64_t r0,
                                          std::int64_t r1, std::int64_t d, double eps, double* y, double* mean,
                                          double* rstd) {
  layer_norm_rows(x, w, b, r0, r1, d, eps, y, mean, rstd);
}
ARCAL_FUSED_CLONES void layer_norm_backward_kernel(const float* x, const float* w, const float* dy, const float* mean,
                                                   const float* rstd, std::int64_t r0, std::int64_t r1, std::int64_t d,
                                                   float* dx, float* dw_part, float* db_part) {
  layer_norm_backward_rows(x, w, dy, mean, rstd, r0, r1, d, dx, dw_part, db_part);
}
// float x, bf16 y (forward) and bf16 dy (backward).
ARCAL_FUSED_CLONES void layer_norm_kernel(const float* x, const float* w, const float* b, std::int64_t r0,
                                          std::int64_t r1, std::int64_t d, float eps, std::uint16_t* y, float* mean,
                                          float* rstd) {
  layer_norm_rows(x, w, b, r0, r1, d, eps, y, mean, rstd);
}
ARCAL_FUSED_CLONES void layer_norm_backward_kernel(const float* x, const float* w, const std::uint16_t* dy,
                                                   const float* mean, const float* rstd, std::int64_t r0,
                                                   std::int64_t r1, std::int64_t d, float* dx, float* dw_part,
                                                   float* db_part) {
  layer_norm_backward_rows(x, w, dy, mean, rstd, r0, r1, d, dx, dw_part, db_part);
}
ARCAL_FUSED_CLONES void layer_norm_backward_kernel(const double* x, const double* w, const double* dy,
                                                   const double* mean, const double* rstd, std::int64_t r0,
                                                   std::int64_t r1, std::int64_t d, double* dx, double* dw_part,
                                                   double* db_part) {
  layer_norm_backward_rows(x, w, dy, mean, rstd, r0, r1, d, dx, dw_part, db_part);
}

std::int64_t norm_block_grain(std::int64_t d) {  // blocks per task: about 2^14 values
  return std::max<std::int64_t>(1, (std::int64_t(1) << 14) / (kNormBlock * std::max<std::int64_t>(d, 1)));
}

}  // namespace arcal::fused
