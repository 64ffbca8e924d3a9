#include "ops/routing_bank.hpp"

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

// Rows per parallel task: about 16K multiply-adds each.
std::int64_t routing_grain(int S, std::int64_t d) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, S * d));
}

// ---- routing point with its scores (RoutingBank): rows n of N = B*T, width d, S sources --------
// logit_s = r_s (v_s . u), r_s = (mean_c v_s[c]^2 + eps)^(-1/2), alpha = softmax_s(logit),
// h = sum_s alpha_s v_s. Backward with g = dh: dalpha_s = g . v_s, dlogit_s = alpha_s (dalpha_s -
// sum_s' alpha_s' dalpha_s'), dv_s = alpha_s g + dlogit_s (r_s u - r_s^3 (v_s . u) v_s / d), du =
// sum over rows of dlogit_s r_s v_s. A point's backward computes du and keeps, per source, the row
// coefficients (alpha_s, cu_s = dlogit_s r_s, cv_s = dlogit_s r_s^3 (v_s . u) / d) beside g; the
// source's tap then builds dv_s = sum over its points (alpha g + cu u) - (sum cv) v_s in one pass,
// reading each point's g once and writing dv_s once (rather than a read-modify-write of dv_s per point).

// Every kernel below walks its rows in blocks of kRowBlock and, inside a block, one source (or one
// point) at a time: each pass then streams one tensor's contiguous block, which the prefetchers
// follow, instead of hopping between up to S tensors row by row; the block's own rows stay in L1.

// One row's 16 lane sums (lanes 0-7 in [0], 8-15 in [1]) of v_c w_c and, with kSquares, of v_c^2.
template <bool kSquares, typename V>
ARCAL_ALWAYS_INLINE void row_lane_sums(const V* __restrict v, const float* __restrict w, std::int64_t d, LaneVec* dot,
                                       LaneVec* squares) {
  LaneVec a = {}, b = {}, p = {}, q = {};
  for (std::int64_t c = 0; c < d; c += 16) {
    LaneVec x0, x1, w0, w1;
    lane_load8(v + c, x0);
    lane_load8(v + c + 8, x1);
    lane_load8(w + c, w0);
    lane_load8(w + c + 8, w1);
    if constexpr (kSquares) {
      a += x0 * x0;
      b += x1 * x1;
    }
    p += x0 * w0;
    q += x1 * w1;
  }
  dot[0] = p, dot[1] = q;
  if constexpr (kSquares) squares[0] = a, squares[1] = b;
}
// ss = sum_c v_c^2 and dot = sum_c v_c u_c of rows n..n+7.
template <typename V>
ARCAL_ALWAYS_INLINE void score_sums8(const V* __restrict values, const float* __restrict u, std::int64_t n,
                                     std::int64_t d, float* ss, float* dot) {
  LaneVec ss_lo[8], ss_hi[8], dot_lo[8], dot_hi[8];
  for (int r = 0; r < 8; ++r) {
    LaneVec dots[2], squares[2];
    row_lane_sums<true>(values + (n + r) * d, u, d, dots, squares);
    ss_lo[r] = squares[0], ss_hi[r] = squares[1], dot_lo[r] = dots[0], dot_hi[r] = dots[1];
  }
  lane_totals8(ss_lo, ss_hi, ss);
  lane_totals8(dot_lo, dot_hi, dot);
}
// dot = sum_c v_c w_c of rows n..n+7, row r's w at w + (n + r) * w_stride: stride 0 for a point's
// query u (a source whose r is known: the same lanes and totals as score_sums8's dot, so bitwise its
// value), stride d for the point's output gradient g (products commute exactly).
template <typename V>
ARCAL_ALWAYS_INLINE void row_dots8(const V* __restrict values, const float* __restrict w, std::int64_t w_stride,
                                   std::int64_t n, std::int64_t d, float* dot) {
  LaneVec lo[8], hi[8];
  for (int r = 0; r < 8; ++r) {
    LaneVec dots[2];
    row_lane_sums<false>(values + (n + r) * d, w + (n + r) * w_stride, d, dots, nullptr);
    lo[r] = dots[0], hi[r] = dots[1];
  }
  lane_totals8(lo, hi, dot);
}

// A point's sources are stored in T or, in a float bank under bf16 autocast (the sublayers' outputs
// as the linears wrote them), in bf16: values[s] points at T, or at bf16 where half[s] != 0 (half may
// be null: every source in T), widened as read. The arithmetic is T's either way, so a bf16 source
// gives bitwise what its widened float copy gave, at half the bytes read.
// known: the source's r rows from an earlier point of the same forward pass (same rows, same eps,
// so the same values), or null. With it the float 8-row path sums v.u alone and copies r; the
// one-row path computes both as before and keeps the known r (bitwise the one it computes).
template <typename T, int HD, typename V>
ARCAL_ALWAYS_INLINE void score_rows(const V* __restrict values, const T* __restrict u, std::int64_t b0, std::int64_t b1,
                                    std::int64_t d_runtime, T eps, T* __restrict logit, T* __restrict rinv,
                                    const T* __restrict known) {
  const std::int64_t d = HD > 0 ? HD : d_runtime;
  const T inv_d = T(1) / T(d);
  const auto finish = [&](std::int64_t row, T ss, T dot) {  // r = (mean v^2 + eps)^(-1/2), logit = r v.u
    const T r = known ? known[row] : T(1) / std::sqrt(ss * inv_d + eps);
    rinv[row] = r;
    logit[row] = r * dot;
  };
  std::int64_t n = b0;
  if constexpr (std::is_same_v<T, float>) {
    if (rows_by_eight(d)) {
      if (known)
        for (; n + 8 <= b1; n += 8) {
          float dot[8];
          row_dots8(values, u, 0, n, d, dot);
          for (int r = 0; r < 8; ++r) finish(n + r, 0.0f, dot[r]);
        }
      else
        for (; n + 8 <= b1; n += 8) {
          float ss[8], dot[8];
          score_sums8(values, u, n, d, ss, dot);
          for (int r = 0; r < 8; ++r) finish(n + r, ss[r], dot[r]);
        }
    }
  }
  for (; n < b1; ++n) {
    const V* __restrict v = values + n * d;
    T ss = 0, dot = 0;
#pragma omp simd reduction(+ : ss, dot)
    for (std::int64_t c = 0; c < d; ++c) {
      const T x = widen(v[c]);
      ss += x * x;
      dot += x * u[c];
    }
    finish(n, ss, dot);
  }
}

template <typename T, int HD, typename V>
ARCAL_ALWAYS_INLINE void weighted_add_rows(const V* __restrict values, const T* __restrict alpha, std::int64_t b0,
                                           std::int64_t b1, std::int64_t d_runtime, bool first, T* __restrict out) {
  const std::int64_t d = HD > 0 ? HD : d_runtime;
  for (std::int64_t n = b0; n < b1; ++n) {
    T* __restrict o = out + n * d;
    const T a = alpha[n];
    const V* __restrict v = values + n * d;
    if (first) {
#pragma omp simd
      for (std::int64_t c = 0; c < d; ++c) o[c] = a * widen(v[c]);
    } else {
#pragma omp simd
      for (std::int64_t c = 0; c < d; ++c) o[c] += a * widen(v[c]);
    }
  }
}

template <typename T, int HD>
ARCAL_ALWAYS_INLINE void route_point_rows(const T* u, const void* const* values, const std::uint8_t* half,
                                          const T* const* known, int S, std::int64_t N, std::int64_t d_runtime, T eps,
                                          std::int64_t begin, std::int64_t end, T* out, T* alpha, T* logit, T* rinv) {
  for (std::int64_t b0 = begin; b0 < end; b0 += kRowBlock) {
    const std::int64_t b1 = std::min(end, b0 + kRowBlock);
    for (int s = 0; s < S; ++s) {
      const T* kn = known ? known[s] : nullptr;
      if (half && half[s])
        score_rows<T, HD>(static_cast<const std::uint16_t*>(values[s]), u, b0, b1, d_runtime, eps, logit + s * N,
                          rinv + s * N, kn);
      else
        score_rows<T, HD>(static_cast<const T*>(values[s]), u, b0, b1, d_runtime, eps, logit + s * N, rinv + s * N, kn);
    }
    // The softmax over sources, vectorised along the block's rows (each row's max and sum still
    // run over s in order).
    const std::int64_t m = b1 - b0;
    T mx[kRowBlock], sum[kRowBlock];
    for (std::int64_t i = 0; i < m; ++i) mx[i] = -std::numeric_limits<T>::infinity(), sum[i] = 0;
    for (int s = 0; s < S; ++s) {
      const T* __restrict lg = logit + s * N + b0;
#pragma omp simd
      for (std::int64_t i = 0; i < m; ++i) mx[i] = std::max(mx[i], lg[i]);
    }
    for (int s = 0; s < S; ++s) {
      const T* __restrict lg = logit + s * N + b0;
      T* __restrict al = alpha + s * N + b0;
#pragma omp simd
      for (std::int64_t i = 0; i < m; ++i) {
        const T e = exp_shifted<T>(lg[i] - mx[i]);
        al[i] = e;
        sum[i] += e;
      }
    }
    for (std::int64_t i = 0; i < m; ++i) sum[i] = T(1) / sum[i];
    for (int s = 0; s < S; ++s) {
      T* __restrict al = alpha + s * N + b0;
#pragma omp simd
      for (std::int64_t i = 0; i < m; ++i) al[i] *= sum[i];
    }
    for (int s = 0; s < S; ++s) {
      if (half && half[s])
        weighted_add_rows<T, HD>(static_cast<const std::uint16_t*>(values[s]), alpha + s * N, b0, b1, d_runtime, s == 0,
                                 out);
      else
        weighted_add_rows<T, HD>(static_cast<const T*>(values[s]), alpha + s * N, b0, b1, d_runtime, s == 0, out);
    }
  }
}

// dalpha_s = g . v_s for the rows of one block (da_s: one value per row, from b0).
template <typename T, int HD, typename V>
ARCAL_ALWAYS_INLINE void grad_dot_rows(const V* __restrict values, const T* __restrict grad, std::int64_t b0,
                                       std::int64_t b1, std::int64_t d_runtime, T* __restrict da_s) {
  const std::int64_t d = HD > 0 ? HD : d_runtime;
  std::int64_t n = b0;
  if constexpr (std::is_same_v<T, float>) {
    if (rows_by_eight(d))
      for (; n + 8 <= b1; n += 8) row_dots8(values, grad, d, n, d, da_s + (n - b0));
  }
  for (; n < b1; ++n) {
    const T* __restrict g = grad + n * d;
    const V* __restrict v = values + n * d;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t c = 0; c < d; ++c) dot += g[c] * widen(v[c]);
    da_s[n - b0] = dot;
  }
}

// Source s's coefficient rows (cu_s, cv_s) of one block and its share of du (sum of cu_s v_s).
template <typename T, int HD, typename V>
ARCAL_ALWAYS_INLINE void coefficient_rows(const V* __restrict values, const T* alpha_s, const T* rinv_s,
                                          const T* logit_s, const T* da_s, const T* m, std::int64_t b0, std::int64_t b1,
                                          std::int64_t d_runtime, T* __restrict cu_s, T* __restrict cv_s,
                                          T* __restrict du) {
  const std::int64_t d = HD > 0 ? HD : d_runtime;
  const T inv_d = T(1) / T(d);
  for (std::int64_t n = b0; n < b1; ++n) {
    const T a = alpha_s[n], r = rinv_s[n];
    const T dl = a * (da_s[n - b0] - m[n - b0]);
    const T cu = dl * r;  // along u
    cu_s[n] = cu;
    cv_s[n] = dl * r * r * logit_s[n] * inv_d;  // along v_s: dl r^3 (v . u) / d
    const V* __restrict v = values + n * d;
#pragma omp simd
    for (std::int64_t c = 0; c < d; ++c) du[c] += cu * widen(v[c]);
  }
}

// The row coefficients cu, cv ([S, N] planes) of the rows [begin, end), and in du (d values) this
// range's sum of cu_s v_s; da is scratch of S * kRowBlock values.
template <typename T, int HD>
ARCAL_ALWAYS_INLINE void route_point_backward_rows(const void* const* values, const std::uint8_t* half, const T* alpha,
                                                   const T* logit, const T* rinv, const T* grad, int S, std::int64_t N,
                                                   std::int64_t d_runtime, std::int64_t begin, std::int64_t end,
                                                   T* __restrict cu_out, T* __restrict cv_out, T* __restrict du,
                                                   T* __restrict da) {
  const std::int64_t d = HD > 0 ? HD : d_runtime;
#pragma omp simd
  for (std::int64_t c = 0; c < d; ++c) du[c] = 0;
  for (std::int64_t b0 = begin; b0 < end; b0 += kRowBlock) {
    const std::int64_t b1 = std::min(end, b0 + kRowBlock);
    for (int s = 0; s < S; ++s) {
      if (half && half[s])
        grad_dot_rows<T, HD>(static_cast<const std::uint16_t*>(values[s]), grad, b0, b1, d_runtime, da + s * kRowBlock);
      else
        grad_dot_rows<T, HD>(static_cast<const T*>(values[s]), grad, b0, b1, d_runtime, da + s * kRowBlock);
    }
    T m[kRowBlock];  // sum_s alpha_s dalpha_s per row, over s in order, vectorised along the rows
    const std::int64_t rows = b1 - b0;
    for (std::int64_t i = 0; i < rows; ++i) m[i] = 0;
    for (int s = 0; s < S; ++s) {
      const T* __restrict al = alpha + s * N + b0;
      const T* __restrict das = da + s * kRowBlock;
#pragma omp simd
      for (std::int64_t i = 0; i < rows; ++i) m[i] += al[i] * das[i];
    }
    for (int s = 0; s < S; ++s) {
      const std::int64_t o = s * N;
      if (half && half[s])
        coefficient_rows<T, HD>(static_cast<const std::uint16_t*>(values[s]), alpha + o, rinv + o, logit + o,
                                da + s * kRowBlock, m, b0, b1, d_runtime, cu_out + o, cv_out + o, du);
      else
        coefficient_rows<T, HD>(static_cast<const T*>(values[s]), alpha + o, rinv + o, logit + o, da + s * kRowBlock, m,
                                b0, b1, d_runtime, cu_out + o, cv_out + o, du);
    }
  }
}

// dv (rows [begin, end) of one source v, stored as V) from its K points: point k's alpha, cu and cv
// rows of this source (a[k], cu[k], cv[k], N each), its output gradient g[k] (N x d) and its query
// u[k] (d). dv is in T (a bf16 source's gradient is rounded once, after the sum).
template <typename T, int HD, typename V>
ARCAL_ALWAYS_INLINE void source_grad_rows(const V* v, int K, const T* const* a, const T* const* cu, const T* const* cv,
                                          const T* const* g, const T* const* u, std::int64_t d_runtime,
                                          std::int64_t begin, std::int64_t end, T* out) {
  const std::int64_t d = HD > 0 ? HD : d_runtime;
  for (std::int64_t b0 = begin; b0 < end; b0 += kRowBlock) {
    const std::int64_t b1 = std::min(end, b0 + kRowBlock);
    T cvs[kRowBlock] = {};
    for (int k = 0; k < K; ++k) {
      const T* __restrict uk = u[k];
      for (std::int64_t n = b0; n < b1; ++n) {
        const T A = a[k][n], C = cu[k][n];
        cvs[n - b0] += cv[k][n];
        const T* __restrict gk = g[k] + n * d;
        T* __restrict o = out + n * d;
        if (k == 0) {
#pragma omp simd
          for (std::int64_t c = 0; c < d; ++c) o[c] = A * gk[c] + C * uk[c];
        } else {
#pragma omp simd
          for (std::int64_t c = 0; c < d; ++c) o[c] += A * gk[c] + C * uk[c];
        }
      }
    }
    for (std::int64_t n = b0; n < b1; ++n) {
      T* __restrict o = out + n * d;
      const V* __restrict vn = v + n * d;
      const T cs = cvs[n - b0];
#pragma omp simd
      for (std::int64_t c = 0; c < d; ++c) o[c] -= cs * widen(vn[c]);
    }
  }
}

// The widths of the presets (64: the tiny ViTs, 128: the LMs, 192, 384) get their own compiled loops.
template <typename T>
ARCAL_ALWAYS_INLINE void route_point_range(const T* u, const void* const* v, const std::uint8_t* half,
                                           const T* const* kn, int S, std::int64_t N, std::int64_t d, T eps,
                                           std::int64_t b, std::int64_t e, T* o, T* a, T* l, T* r) {
  switch (d) {
    case 64: return route_point_rows<T, 64>(u, v, half, kn, S, N, d, eps, b, e, o, a, l, r);
    case 128: return route_point_rows<T, 128>(u, v, half, kn, S, N, d, eps, b, e, o, a, l, r);
    case 192: return route_point_rows<T, 192>(u, v, half, kn, S, N, d, eps, b, e, o, a, l, r);
    case 384: return route_point_rows<T, 384>(u, v, half, kn, S, N, d, eps, b, e, o, a, l, r);
    default: return route_point_rows<T, 0>(u, v, half, kn, S, N, d, eps, b, e, o, a, l, r);
  }
}
template <typename T>
ARCAL_ALWAYS_INLINE void route_point_backward_range(const void* const* v, const std::uint8_t* half, const T* a,
                                                    const T* l, const T* r, const T* g, int S, std::int64_t N,
                                                    std::int64_t d, std::int64_t b, std::int64_t e, T* cu, T* cv, T* du,
                                                    T* da) {
  switch (d) {
    case 64: return route_point_backward_rows<T, 64>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
    case 128: return route_point_backward_rows<T, 128>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
    case 192: return route_point_backward_rows<T, 192>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
    case 384: return route_point_backward_rows<T, 384>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
    default: return route_point_backward_rows<T, 0>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
  }
}
template <typename T, typename V>
ARCAL_ALWAYS_INLINE void source_grad_range(const V* v, int K, const T* const* a, const T* const* cu, const T* const* cv,
                                           const T* const* g, const T* const* u, std::int64_t d, std::int64_t b,
                                           std::int64_t e, T* out) {
  switch (d) {
    case 64: return source_grad_rows<T, 64>(v, K, a, cu, cv, g, u, d, b, e, out);
    case 128: return source_grad_rows<T, 128>(v, K, a, cu, cv, g, u, d, b, e, out);
    case 192: return source_grad_rows<T, 192>(v, K, a, cu, cv, g, u, d, b, e, out);
    case 384: return source_grad_rows<T, 384>(v, K, a, cu, cv, g, u, d, b, e, out);
    default: return source_grad_rows<T, 0>(v, K, a, cu, cv, g, u, d, b, e, out);
  }
}

ARCAL_FUSED_CLONES void route_point_f(const float* u, const void* const* values, const std::uint8_t* half,
                                      const float* const* known, int S, std::int64_t N, std::int64_t d, float eps,
                                      std::int64_t b, std::int64_t e, float* out, float* alpha, float* logit,
                                      float* rinv) {
  route_point_range(u, values, half, known, S, N, d, eps, b, e, out, alpha, logit, rinv);
}
ARCAL_FUSED_CLONES void route_point_d(const double* u, const void* const* values, const double* const* known, int S,
                                      std::int64_t N, std::int64_t d, double eps, std::int64_t b, std::int64_t e,
                                      double* out, double* alpha, double* logit, double* rinv) {
  route_point_range(u, values, nullptr, known, S, N, d, eps, b, e, out, alpha, logit, rinv);
}
ARCAL_FUSED_CLONES void route_point_backward_f(const void* const* values, const std::uint8_t* half, const float* alpha,
                                               const float* logit, const float* rinv, const float* grad, int S,
                                               std::int64_t N, std::int64_t d, std::int64_t b, std::int64_t e,
                                               float* cu, float* cv, float* du, float* da) {
  route_point_backward_range(values, half, alpha, logit, rinv, grad, S, N, d, b, e, cu, cv, du, da);
}
ARCAL_FUSED_CLONES void route_point_backward_d(const void* const* values, const double* alpha, const double* logit,
                                               const double* rinv, const double* grad, int S, std::int64_t N,
                                               std::int64_t d, std::int64_t b, std::int64_t e, double* cu, double* cv,
                                               double* du, double* da) {
  route_point_backward_range(values, nullptr, alpha, logit, rinv, grad, S, N, d, b, e, cu, cv, du, da);
}
ARCAL_FUSED_CLONES void source_grad_f(const float* v, int K, const float* const* a, const float* const* cu,
                                      const float* const* cv, const float* const* g, const float* const* u,
                                      std::int64_t d, std::int64_t b, std::int64_t e, float* out) {
  source_grad_range(v, K, a, cu, cv, g, u, d, b, e, out);
}
ARCAL_FUSED_CLONES void source_grad_bf16(const std::uint16_t* v, int K, const float* const* a, const float* const* cu,
                                         const float* const* cv, const float* const* g, const float* const* u,
                                         std::int64_t d, std::int64_t b, std::int64_t e, float* out) {
  source_grad_range(v, K, a, cu, cv, g, u, d, b, e, out);
}
ARCAL_FUSED_CLONES void source_grad_d(const double* v, int K, const double* const* a, const double* const* cu,
                                      const double* const* cv, const double* const* g, const double* const* u,
                                      std::int64_t d, std::int64_t b, std::int64_t e, double* out) {
  source_grad_range(v, K, a, cu, cv, g, u, d, b, e, out);
}

void route_point(const float* u, const void* const* v, const std::uint8_t* half, const float* const* kn, int S,
                 std::int64_t N, std::int64_t d, double eps, std::int64_t b, std::int64_t e, float* o, float* a,
                 float* l, float* r) {
  route_point_f(u, v, half, kn, S, N, d, float(eps), b, e, o, a, l, r);
}
void route_point(const double* u, const void* const* v, const std::uint8_t*, const double* const* kn, int S,
                 std::int64_t N, std::int64_t d, double eps, std::int64_t b, std::int64_t e, double* o, double* a,
                 double* l, double* r) {
  route_point_d(u, v, kn, S, N, d, eps, b, e, o, a, l, r);
}
void route_point_backward(const void* const* v, const std::uint8_t* half, const float* a, const float* l,
                          const float* r, const float* g, int S, std::int64_t N, std::int64_t d, std::int64_t b,
                          std::int64_t e, float* cu, float* cv, float* du, float* da) {
  route_point_backward_f(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
}
void route_point_backward(const void* const* v, const std::uint8_t*, const double* a, const double* l, const double* r,
                          const double* g, int S, std::int64_t N, std::int64_t d, std::int64_t b, std::int64_t e,
                          double* cu, double* cv, double* du, double* da) {
  route_point_backward_d(v, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
}
void source_grad(const float* v, int K, const float* const* a, const float* const* cu, const float* const* cv,
                 const float* const* g, const float* const* u, std::int64_t d, std::int64_t b, std::int64_t e,
                 float* out) {
  source_grad_f(v, K, a, cu, cv, g, u, d, b, e, out);
}
void source_grad(const std::uint16_t* v, int K, const float* const* a, const float* const* cu, const float* const* cv,
                 const float* const* g, const float* const* u, std::int64_t d, std::int64_t b, std::int64_t e,
                 float* out) {
  source_grad_bf16(v, K, a, cu, cv, g, u, d, b, e, out);
}
void source_grad(const double* v, int K, const double* const* a, const double* const* cu, const double* const* cv,
                 const double* const* g, const double* const* u, std::int64_t d, std::int64_t b, std::int64_t e,
                 double* out) {
  source_grad_d(v, K, a, cu, cv, g, u, d, b, e, out);
}

// Rows of one block of the backward's du reduction: fixed, so that du's summation order (blocks in
// order) and hence its value do not depend on the thread count.

}  // namespace arcal::fused
