#include "model/fused.hpp"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/check.hpp"
#include "core/env_switch.hpp"
#include "core/fast_exp.hpp"
#include "ops/phi.hpp"

// Each kernel is a plain loop nest the compiler vectorises over the innermost contiguous axis (the
// head dimension, the width); target clones give every ISA level its own copy.
#ifdef ARCAL_NO_TARGET_CLONES  // ThreadSanitizer builds: an instrumented ifunc resolver runs before TSan's runtime exists
#define ARCAL_FUSED_CLONES
#else
#define ARCAL_FUSED_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

namespace arcal {

namespace {

EnvSwitch g_fused("ARCAL_FUSED");

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename T>
ARCAL_ALWAYS_INLINE T exp_shifted(T x) {  // e^x for x <= 0
  if constexpr (std::is_same_v<T, float>)
    return exp_nonpos(x);
  else
    return std::exp(x);
}

// Storage and arithmetic: float and double are computed in their own type; bf16 storage (what the
// linears write under autocast) is widened to float (exact) when read and rounded to the nearest
// bf16 (ties to even, NaN kept quiet) when written, as LibTorch's conversions round.
ARCAL_ALWAYS_INLINE float widen(float v) { return v; }
ARCAL_ALWAYS_INLINE double widen(double v) { return v; }
ARCAL_ALWAYS_INLINE float widen(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
ARCAL_ALWAYS_INLINE void store(float& dst, float v) { dst = v; }
ARCAL_ALWAYS_INLINE void store(double& dst, double v) { dst = v; }
ARCAL_ALWAYS_INLINE void store(std::uint16_t& dst, float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  dst = f != f ? std::uint16_t(0x7fc0) : std::uint16_t(rounded);
}

// ---- 8-float vectors (GCC's vector extensions, so each target clone gets its own ISA's shuffles) ---
// Loads widen bf16 as widen() does and stores round as store() does, so values moved through them are
// those of the element loops. Vectors pass by reference: by value they would change the default
// clone's calling convention.
typedef float LaneVec __attribute__((vector_size(32)));
typedef std::uint32_t LaneBits __attribute__((vector_size(32)));
typedef std::uint16_t LaneHalves __attribute__((vector_size(16)));

ARCAL_ALWAYS_INLINE void lane_load8(const float* p, LaneVec& v) { std::memcpy(&v, p, sizeof v); }
ARCAL_ALWAYS_INLINE void lane_load8(const std::uint16_t* p, LaneVec& v) {
  // Each bf16 becomes the high half of a float whose low half is zero: one interleave with zeros
  // (GCC turns a widening conversion of 8 halves into two half-width ones and an insert).
  typedef std::uint16_t Halves16 __attribute__((vector_size(32)));
  LaneHalves h;
  std::memcpy(&h, p, sizeof h);
  const Halves16 z = __builtin_shufflevector(LaneHalves{}, h, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  v = reinterpret_cast<LaneVec>(z);
}
ARCAL_ALWAYS_INLINE void lane_store8(float* p, const LaneVec& v) { std::memcpy(p, &v, sizeof v); }
ARCAL_ALWAYS_INLINE void lane_store8(std::uint16_t* p, const LaneVec& v) {
  const LaneBits u = reinterpret_cast<LaneBits>(v);
  const LaneBits nan = reinterpret_cast<LaneBits>(v != v);
  const LaneBits rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const LaneHalves h = __builtin_convertvector((rounded & ~nan) | (nan & 0x7fc0u), LaneHalves);
  std::memcpy(p, &h, sizeof h);
}
// r[k][l] <- r[l][k] (an 8 x 8 transpose): pairs interleaved, then quads, then the 4-wide halves exchanged.
ARCAL_ALWAYS_INLINE void lane_transpose8(LaneVec* r) {
  LaneVec t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = __builtin_shufflevector(r[k], r[k + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[k + 1] = __builtin_shufflevector(r[k], r[k + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = __builtin_shufflevector(t[k], t[k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 1] = __builtin_shufflevector(t[k], t[k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[k + 2] = __builtin_shufflevector(t[k + 1], t[k + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 3] = __builtin_shufflevector(t[k + 1], t[k + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    r[k + 4] = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
  }
}

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

// out[c] += sum over blocks of partial[blk * width + c], the blocks added in order: a cross-row sum
// whose row blocks were computed on any threads comes out the same on every thread count.
template <typename T>
void add_block_partials(const T* partial, std::int64_t blocks, std::int64_t width, T* out) {
  for (std::int64_t blk = 0; blk < blocks; ++blk)
    for (std::int64_t c = 0; c < width; ++c) out[c] += partial[blk * width + c];
}

// Every kernel below walks its rows in blocks of kRowBlock and, inside a block, one source (or one
// point) at a time: each pass then streams one tensor's contiguous block, which the prefetchers
// follow, instead of hopping between up to S tensors row by row; the block's own rows stay in L1.
constexpr std::int64_t kRowBlock = 32;

// Row sums in float when d is a multiple of 16, 8 rows at a time. A row's sum is held in 16 lanes
// (lane l adds the terms c = l, l + 16, ... in order, by multiply-adds), and the lanes are then added
// in order 0..15 to zero: the order GCC's vectorised reduction gives the one-row loops below in the
// AVX-512 clone, so there the sums are bitwise theirs (a bf16 training's model.pt is byte-identical;
// the other clones' one-row loops may add in another order). The per-row lane additions (16 dependent
// scalar adds after a spill, half of a routing point's time) become one transpose and 16 vector adds
// for 8 rows.
ARCAL_ALWAYS_INLINE void lane_totals8(LaneVec* lo, LaneVec* hi, float* out) {
  lane_transpose8(lo);
  lane_transpose8(hi);
  LaneVec t = {};
  for (int l = 0; l < 8; ++l) t += lo[l];
  for (int l = 0; l < 8; ++l) t += hi[l];
  lane_store8(out, t);
}
constexpr bool rows_by_eight(std::int64_t d) { return d % 16 == 0; }

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
ARCAL_ALWAYS_INLINE void score_rows(const V* __restrict values, const T* __restrict u, std::int64_t b0,
                                    std::int64_t b1, std::int64_t d_runtime, T eps, T* __restrict logit,
                                    T* __restrict rinv, const T* __restrict known) {
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
                                          const T* const* known, int S, std::int64_t N, std::int64_t d_runtime,
                                          T eps, std::int64_t begin, std::int64_t end, T* out, T* alpha, T* logit,
                                          T* rinv) {
  for (std::int64_t b0 = begin; b0 < end; b0 += kRowBlock) {
    const std::int64_t b1 = std::min(end, b0 + kRowBlock);
    for (int s = 0; s < S; ++s) {
      const T* kn = known ? known[s] : nullptr;
      if (half && half[s])
        score_rows<T, HD>(static_cast<const std::uint16_t*>(values[s]), u, b0, b1, d_runtime, eps, logit + s * N,
                          rinv + s * N, kn);
      else
        score_rows<T, HD>(static_cast<const T*>(values[s]), u, b0, b1, d_runtime, eps, logit + s * N, rinv + s * N,
                          kn);
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
        weighted_add_rows<T, HD>(static_cast<const std::uint16_t*>(values[s]), alpha + s * N, b0, b1, d_runtime,
                                 s == 0, out);
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
                                          const T* logit_s, const T* da_s, const T* m, std::int64_t b0,
                                          std::int64_t b1, std::int64_t d_runtime, T* __restrict cu_s,
                                          T* __restrict cv_s, T* __restrict du) {
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
ARCAL_ALWAYS_INLINE void route_point_backward_rows(const void* const* values, const std::uint8_t* half,
                                                   const T* alpha, const T* logit, const T* rinv, const T* grad,
                                                   int S, std::int64_t N, std::int64_t d_runtime, std::int64_t begin,
                                                   std::int64_t end, T* __restrict cu_out, T* __restrict cv_out,
                                                   T* __restrict du, T* __restrict da) {
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
        coefficient_rows<T, HD>(static_cast<const T*>(values[s]), alpha + o, rinv + o, logit + o, da + s * kRowBlock,
                                m, b0, b1, d_runtime, cu_out + o, cv_out + o, du);
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
                                                    std::int64_t d, std::int64_t b, std::int64_t e, T* cu, T* cv,
                                                    T* du, T* da) {
  switch (d) {
    case 64: return route_point_backward_rows<T, 64>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
    case 128: return route_point_backward_rows<T, 128>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
    case 192: return route_point_backward_rows<T, 192>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
    case 384: return route_point_backward_rows<T, 384>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
    default: return route_point_backward_rows<T, 0>(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
  }
}
template <typename T, typename V>
ARCAL_ALWAYS_INLINE void source_grad_range(const V* v, int K, const T* const* a, const T* const* cu,
                                           const T* const* cv, const T* const* g, const T* const* u, std::int64_t d,
                                           std::int64_t b, std::int64_t e, T* out) {
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
ARCAL_FUSED_CLONES void route_point_backward_f(const void* const* values, const std::uint8_t* half,
                                               const float* alpha, const float* logit, const float* rinv,
                                               const float* grad, int S, std::int64_t N, std::int64_t d,
                                               std::int64_t b, std::int64_t e, float* cu, float* cv, float* du,
                                               float* da) {
  route_point_backward_range(values, half, alpha, logit, rinv, grad, S, N, d, b, e, cu, cv, du, da);
}
ARCAL_FUSED_CLONES void route_point_backward_d(const void* const* values, const double* alpha, const double* logit,
                                               const double* rinv, const double* grad, int S, std::int64_t N,
                                               std::int64_t d, std::int64_t b, std::int64_t e, double* cu,
                                               double* cv, double* du, double* da) {
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

inline void route_point(const float* u, const void* const* v, const std::uint8_t* half, const float* const* kn,
                        int S, std::int64_t N, std::int64_t d, double eps, std::int64_t b, std::int64_t e, float* o,
                        float* a, float* l, float* r) {
  route_point_f(u, v, half, kn, S, N, d, float(eps), b, e, o, a, l, r);
}
inline void route_point(const double* u, const void* const* v, const std::uint8_t*, const double* const* kn, int S,
                        std::int64_t N, std::int64_t d, double eps, std::int64_t b, std::int64_t e, double* o,
                        double* a, double* l, double* r) {
  route_point_d(u, v, kn, S, N, d, eps, b, e, o, a, l, r);
}
inline void route_point_backward(const void* const* v, const std::uint8_t* half, const float* a, const float* l,
                                 const float* r, const float* g, int S, std::int64_t N, std::int64_t d,
                                 std::int64_t b, std::int64_t e, float* cu, float* cv, float* du, float* da) {
  route_point_backward_f(v, half, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
}
inline void route_point_backward(const void* const* v, const std::uint8_t*, const double* a, const double* l,
                                 const double* r, const double* g, int S, std::int64_t N, std::int64_t d,
                                 std::int64_t b, std::int64_t e, double* cu, double* cv, double* du, double* da) {
  route_point_backward_d(v, a, l, r, g, S, N, d, b, e, cu, cv, du, da);
}
inline void source_grad(const float* v, int K, const float* const* a, const float* const* cu, const float* const* cv,
                        const float* const* g, const float* const* u, std::int64_t d, std::int64_t b, std::int64_t e,
                        float* out) {
  source_grad_f(v, K, a, cu, cv, g, u, d, b, e, out);
}
inline void source_grad(const std::uint16_t* v, int K, const float* const* a, const float* const* cu,
                        const float* const* cv, const float* const* g, const float* const* u, std::int64_t d,
                        std::int64_t b, std::int64_t e, float* out) {
  source_grad_bf16(v, K, a, cu, cv, g, u, d, b, e, out);
}
inline void source_grad(const double* v, int K, const double* const* a, const double* const* cu,
                        const double* const* cv, const double* const* g, const double* const* u, std::int64_t d,
                        std::int64_t b, std::int64_t e, double* out) {
  source_grad_d(v, K, a, cu, cv, g, u, d, b, e, out);
}

// Rows of one block of the backward's du reduction: fixed, so that du's summation order (blocks in
// order) and hence its value do not depend on the thread count.
constexpr std::int64_t kRouteBlock = 128;

}  // namespace

/// What the routing points of one forward pass leave for their sources' taps (RoutingBank): per
/// point whose backward ran, its output gradient, alpha, the coefficient planes and its query; per
/// slot, the (point record, source position) pairs that read it.
struct RoutingBankState : torch::CustomClassHolder {
  struct Record {
    torch::Tensor g, alpha, coef, u;  // (B,T,d), (S,B,T), (2,S,B,T): cu then cv, (d)
    int pending = 0;                  // slots not yet handed on; the tensors are released at 0
  };
  std::vector<Record> records;
  std::vector<std::vector<std::pair<int, int>>> uses;  // [slot] (record, position in the point)
  // [slot] the source's r = (mean v^2 + eps)^(-1/2) per row (B,T), from the first point that read it
  // (a view of that point's statistics), and the eps it was computed with: later points reuse it.
  std::vector<torch::Tensor> rinv;
  std::vector<double> rinv_eps;
};

namespace {

// The arithmetic dtype of a bank holding `source`: its own, float for a bf16 source.
torch::ScalarType bank_dtype(const torch::Tensor& source) {
  return source.scalar_type() == torch::kBFloat16 ? torch::kFloat : source.scalar_type();
}

// The sources' data and which of them are bf16 (the kernels' values and half arguments).
std::pair<std::vector<const void*>, std::vector<std::uint8_t>> source_pointers(const std::vector<torch::Tensor>& v) {
  std::vector<const void*> p(v.size());
  std::vector<std::uint8_t> half(v.size());
  for (std::size_t s = 0; s < v.size(); ++s) {
    half[s] = v[s].scalar_type() == torch::kBFloat16;
    p[s] = v[s].data_ptr();
  }
  return {p, half};
}

c10::intrusive_ptr<RoutingBankState> bank_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<RoutingBankState>(ctx->saved_data["bank"].toCapsule());
}

// Identity on a source; its backward builds the source's gradient from what the routing points that
// read it left in the bank (plus any gradient that reached the tapped tensor the ordinary way). The
// engine runs it only after every such point, since each has an edge to it.
struct SourceTapFunction : public torch::autograd::Function<SourceTapFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& v, c10::IValue bank, std::int64_t slot) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({v});
    ctx->saved_data["bank"] = std::move(bank);
    ctx->saved_data["slot"] = slot;
    return v;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto bank = bank_of(ctx);
    const auto slot = static_cast<std::size_t>(ctx->saved_data["slot"].toInt());
    auto uses = std::move(bank->uses[slot]);
    bank->uses[slot].clear();
    torch::Tensor g;
    const auto v = ctx->get_saved_variables()[0].contiguous();
    const bool half = v.scalar_type() == torch::kBFloat16;  // summed in float, rounded once
    if (!uses.empty()) {
      const int K = static_cast<int>(uses.size());
      const std::int64_t d = v.size(2), N = v.numel() / d;
      g = torch::empty(v.sizes(), v.options().dtype(bank_dtype(v)));
      // v's data as the kernel reads it (bf16 sources: their own bf16 storage) and dv in T.
      auto run = [&](const auto* vp, auto* o) {
        using T = std::remove_pointer_t<decltype(o)>;
        std::vector<const T*> a(K), cu(K), cv(K), gk(K), u(K);
        for (int k = 0; k < K; ++k) {
          const auto& r = bank->records[static_cast<std::size_t>(uses[std::size_t(k)].first)];
          const std::int64_t s = uses[std::size_t(k)].second, S = r.alpha.size(0);
          a[k] = r.alpha.data_ptr<T>() + s * N;
          cu[k] = r.coef.data_ptr<T>() + s * N;
          cv[k] = r.coef.data_ptr<T>() + (S + s) * N;
          gk[k] = r.g.data_ptr<T>();
          u[k] = r.u.data_ptr<T>();
        }
        at::parallel_for(0, N, routing_grain(2 * K, d), [&](std::int64_t b, std::int64_t e) {
          source_grad(vp, K, a.data(), cu.data(), cv.data(), gk.data(), u.data(), d, b, e, o);
        });
      };
      if (half)
        run(reinterpret_cast<const std::uint16_t*>(v.data_ptr<at::BFloat16>()), g.data_ptr<float>());
      else
        AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "routing_source_grad",
                                   [&] { run(v.data_ptr<scalar_t>(), g.data_ptr<scalar_t>()); });
      for (const auto& [rec, pos] : uses) {  // a point's tensors go once every source it read has its gradient
        auto& r = bank->records[static_cast<std::size_t>(rec)];
        if (--r.pending == 0) r = RoutingBankState::Record{};
      }
    }
    if (grad_outputs[0].defined()) g = g.defined() ? g + grad_outputs[0] : grad_outputs[0];
    if (half && g.defined() && g.scalar_type() != torch::kBFloat16) g = g.to(torch::kBFloat16);
    return {g, torch::Tensor(), torch::Tensor()};
  }
};

struct RoutePointFunction : public torch::autograd::Function<RoutePointFunction> {
  // Returns (h (B,T,d), alpha (S,B,T), not differentiable). slots: each source's slot in the bank.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& u, torch::TensorList sources,
                               c10::IValue bank, std::vector<std::int64_t> slots, double eps) {
    const int S = static_cast<int>(sources.size());
    std::vector<torch::Tensor> v(sources.begin(), sources.end());
    for (auto& t : v) t = t.contiguous();
    auto uc = u.contiguous();
    const std::int64_t B = v[0].size(0), T = v[0].size(1), d = v[0].size(2), N = B * T;
    auto out = torch::empty({B, T, d}, uc.options());  // the bank's dtype (bf16 sources: float)
    auto stats = torch::empty({3, S, B, T}, uc.options());  // alpha, logit, 1/rms
    const auto [vp, half] = source_pointers(v);
    // Each source's r depends on the source alone: the first point that reads it computes it, later
    // points of the same forward pass read it from the bank and only sum v.u (bitwise the same r).
    auto state = c10::static_intrusive_pointer_cast<RoutingBankState>(bank.toCapsule());
    AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "route_point", [&] {
      scalar_t* st = stats.data_ptr<scalar_t>();
      const scalar_t* up = uc.data_ptr<scalar_t>();
      scalar_t* o = out.data_ptr<scalar_t>();
      std::vector<const scalar_t*> known(std::size_t(S), nullptr);
      for (int s = 0; s < S; ++s) {
        const auto slot = static_cast<std::size_t>(slots[std::size_t(s)]);
        const auto& r = state->rinv[slot];
        if (r.defined() && r.scalar_type() == out.scalar_type() && state->rinv_eps[slot] == eps)
          known[std::size_t(s)] = r.template data_ptr<scalar_t>();
      }
      at::parallel_for(0, N, routing_grain(2 * S, d), [&](std::int64_t b, std::int64_t e) {
        route_point(up, vp.data(), half.data(), known.data(), S, N, d, eps, b, e, o, st, st + S * N, st + 2 * S * N);
      });
      for (int s = 0; s < S; ++s) {
        const auto slot = static_cast<std::size_t>(slots[std::size_t(s)]);
        if (known[std::size_t(s)]) continue;
        state->rinv[slot] = stats[2][s];
        state->rinv_eps[slot] = eps;
      }
    });
    auto alpha = stats[0];
    ctx->mark_non_differentiable({alpha});
    ctx->set_materialize_grads(false);  // alpha never receives a gradient: no zeros for it
    variable_list saved{uc, stats};
    saved.insert(saved.end(), v.begin(), v.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["bank"] = std::move(bank);
    ctx->saved_data["slots"] = std::move(slots);
    return {out, alpha};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto& u = saved[0];
    const auto& stats = saved[1];
    const std::vector<torch::Tensor> values(saved.begin() + 2, saved.end());
    const int S = static_cast<int>(values.size());
    const auto slots = ctx->saved_data["slots"].toIntVector();
    auto bank = bank_of(ctx);
    torch::Tensor du = torch::zeros_like(u);
    variable_list grads(std::size_t(1 + S + 3));  // u, every source, bank, slots, eps
    if (grad_outputs[0].defined()) {
      auto grad = grad_outputs[0].to(u.scalar_type()).contiguous();
      const std::int64_t B = values[0].size(0), T = values[0].size(1), d = values[0].size(2), N = B * T;
      auto coef = torch::empty({2, S, B, T}, u.options());  // cu, cv
      const std::int64_t blocks = (N + kRouteBlock - 1) / kRouteBlock;
      auto partial = torch::empty({blocks, d}, u.options());
      const auto [vp, half] = source_pointers(values);
      AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "route_point_backward", [&] {
        const scalar_t* st = stats.data_ptr<scalar_t>();
        const scalar_t* g = grad.data_ptr<scalar_t>();
        scalar_t* cf = coef.data_ptr<scalar_t>();
        scalar_t* pp = partial.data_ptr<scalar_t>();
        const std::int64_t grain = std::max<std::int64_t>(1, routing_grain(2 * S, d) / kRouteBlock);
        at::parallel_for(0, blocks, grain, [&](std::int64_t b0, std::int64_t b1) {
          std::vector<scalar_t> da(static_cast<std::size_t>(S * kRowBlock));
          for (std::int64_t blk = b0; blk < b1; ++blk)
            route_point_backward(vp.data(), half.data(), st, st + S * N, st + 2 * S * N, g, S, N, d, blk * kRouteBlock,
                                 std::min(N, (blk + 1) * kRouteBlock), cf, cf + S * N, pp + blk * d, da.data());
        });
        add_block_partials(pp, blocks, d, du.data_ptr<scalar_t>());
      });
      const int rec = static_cast<int>(bank->records.size());
      bank->records.push_back({grad, stats[0], coef, u, S});
      for (int s = 0; s < S; ++s) bank->uses[static_cast<std::size_t>(slots[std::size_t(s)])].push_back({rec, s});
    }
    grads[0] = du;  // the sources' gradients are built by their taps from what this point left in the bank
    return grads;
  }
};

// ---- GELU (exact, erf form) ---------------------------------------------------------------------
// gelu(x) = x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2; gelu'(x) = Phi(x) + x phi(x). In float, with
// z = |x| / sqrt 2 and t = 1 / (1 + z / 2), erfc(z) = t Q(t) e^{-z^2}: Q(t) = erfcx(z) / t is smooth on
// t in (0, 1] (Q(1) = 1, Q(0) = 1 / (2 sqrt pi)) and Q is its degree-10 Chebyshev least-squares fit in
// relative error (3.7e-8 in double, 2.3e-7 evaluated in float; scripts/fit_erfcx.py fits it against
// scipy.special.erfcx). The one exponential e^{-x^2/2} (core/fast_exp.hpp) serves both Phi and phi,
// so the derivative costs two products more than the value, and the loops vectorise where
// LibTorch's erf costs about 20 cycles per vector. Relative accuracy holds in the tails, where
// 1 + erf(x / sqrt 2) would cancel. In double, std::erfc and std::exp.

// Phi(x) and e^{-x^2/2}: ops/phi.hpp (shared with the probes' GELU, ops/gelu.cpp).

// bf16 (under autocast the first MLP linear writes bf16) is widened to float, computed by the float
// arithmetic, and rounded (widen/store above), as LibTorch's bf16 gelu rounds its float result.
// gelu'(x) is stored in bf16 too, so the backward's product rounds twice where LibTorch's
// gelu_backward rounds once (within 2 bf16 ulps).
template <typename S>
ARCAL_ALWAYS_INLINE void gelu_rows(const S* __restrict x, std::int64_t begin, std::int64_t end, S* __restrict y) {
#pragma omp simd
  for (std::int64_t i = begin; i < end; ++i) {
    const auto v = widen(x[i]);
    store(y[i], v * phi_cdf(v));
  }
}
// Training: the forward pass also writes gelu'(x), which the backward multiplies by the output
// gradient. It replaces x among the saved tensors (same memory); the exponential Phi needs is phi's.
template <typename S>
ARCAL_ALWAYS_INLINE void gelu_derivative_rows(const S* __restrict x, std::int64_t begin, std::int64_t end,
                                              S* __restrict y, S* __restrict dydx) {
#pragma omp simd
  for (std::int64_t i = begin; i < end; ++i) {
    const auto v = widen(x[i]);
    using T = std::remove_const_t<decltype(v)>;
    T gauss;
    const T c = phi_cdf(v, gauss);
    store(y[i], v * c);
    store(dydx[i], c + v * T(0.39894228040143267794) * gauss);
  }
}
ARCAL_FUSED_CLONES void gelu_f(const float* x, std::int64_t b, std::int64_t e, float* y) { gelu_rows(x, b, e, y); }
ARCAL_FUSED_CLONES void gelu_d(const double* x, std::int64_t b, std::int64_t e, double* y) { gelu_rows(x, b, e, y); }
ARCAL_FUSED_CLONES void gelu_derivative_f(const float* x, std::int64_t b, std::int64_t e, float* y, float* dydx) {
  gelu_derivative_rows(x, b, e, y, dydx);
}
ARCAL_FUSED_CLONES void gelu_derivative_d(const double* x, std::int64_t b, std::int64_t e, double* y, double* dydx) {
  gelu_derivative_rows(x, b, e, y, dydx);
}
ARCAL_FUSED_CLONES void gelu_derivative_bf16(const std::uint16_t* x, std::int64_t b, std::int64_t e, std::uint16_t* y,
                                             std::uint16_t* dydx) {
  gelu_derivative_rows(x, b, e, y, dydx);
}
// bf16 by table: a bf16 input takes one of 65536 values, so gelu(x) and gelu'(x) of every one are
// computed once, by the float kernel above (its vector path, as the 32-aligned activations of a
// training take), and each element is then one load: bitwise the kernel's results at about a third
// of its cost (its erfc polynomial, exponential and division run about 48 cycles per 16 floats).
// 256 KB, of which a training's activations touch a few kilobytes.
const std::uint32_t* gelu_bf16_table() {
  static const std::vector<std::uint32_t> table = [] {
    constexpr std::int64_t n = 1 << 16;
    std::vector<std::uint16_t> x(n), y(n), dydx(n);
    for (std::int64_t i = 0; i < n; ++i) x[std::size_t(i)] = std::uint16_t(i);
    gelu_derivative_bf16(x.data(), 0, n, y.data(), dydx.data());
    std::vector<std::uint32_t> t(n);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = std::uint32_t(y[i]) | std::uint32_t(dydx[i]) << 16;
    return t;
  }();
  return table.data();
}
// The lookups, cloned so that AVX-512 gathers them sixteen at a time.
ARCAL_FUSED_CLONES void gelu_lookup(const std::uint32_t* table, const std::uint16_t* x, std::int64_t begin,
                                    std::int64_t end, std::uint16_t* y) {
#pragma omp simd
  for (std::int64_t i = begin; i < end; ++i) y[i] = std::uint16_t(table[x[i]]);
}
ARCAL_FUSED_CLONES void gelu_derivative_lookup(const std::uint32_t* table, const std::uint16_t* x, std::int64_t begin,
                                               std::int64_t end, std::uint16_t* y, std::uint16_t* dydx) {
#pragma omp simd
  for (std::int64_t i = begin; i < end; ++i) {
    const std::uint32_t t = table[x[i]];
    y[i] = std::uint16_t(t);
    dydx[i] = std::uint16_t(t >> 16);
  }
}
inline void gelu_kernel(const c10::BFloat16* x, std::int64_t b, std::int64_t e, c10::BFloat16* y) {
  gelu_lookup(gelu_bf16_table(), reinterpret_cast<const std::uint16_t*>(x), b, e, reinterpret_cast<std::uint16_t*>(y));
}
inline void gelu_derivative_kernel(const c10::BFloat16* x, std::int64_t b, std::int64_t e, c10::BFloat16* y,
                                   c10::BFloat16* dydx) {
  gelu_derivative_lookup(gelu_bf16_table(), reinterpret_cast<const std::uint16_t*>(x), b, e,
                         reinterpret_cast<std::uint16_t*>(y), reinterpret_cast<std::uint16_t*>(dydx));
}
// out = a b rounded to bf16, the product taken in float.
ARCAL_FUSED_CLONES void bf16_product(const std::uint16_t* a, const std::uint16_t* b, std::int64_t begin,
                                     std::int64_t end, std::uint16_t* out) {
#pragma omp simd
  for (std::int64_t i = begin; i < end; ++i) store(out[i], widen(a[i]) * widen(b[i]));
}
inline void gelu_kernel(const float* x, std::int64_t b, std::int64_t e, float* y) { gelu_f(x, b, e, y); }
inline void gelu_kernel(const double* x, std::int64_t b, std::int64_t e, double* y) { gelu_d(x, b, e, y); }
inline void gelu_derivative_kernel(const float* x, std::int64_t b, std::int64_t e, float* y, float* dydx) {
  gelu_derivative_f(x, b, e, y, dydx);
}
inline void gelu_derivative_kernel(const double* x, std::int64_t b, std::int64_t e, double* y, double* dydx) {
  gelu_derivative_d(x, b, e, y, dydx);
}

constexpr std::int64_t kGeluGrain = 1 << 14;

// Without autograd (evaluation, no_grad, an input that needs no gradient): y only.
torch::Tensor gelu_values(const torch::Tensor& x_in) {
  auto x = x_in.contiguous();
  auto y = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "fused_gelu", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    at::parallel_for(0, x.numel(), kGeluGrain, [&](std::int64_t b, std::int64_t e) { gelu_kernel(xp, b, e, yp); });
  });
  return y;
}

struct GeluFunction : public torch::autograd::Function<GeluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in) {
    auto x = x_in.contiguous();
    auto y = torch::empty_like(x);
    auto dydx = torch::empty_like(x);
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "fused_gelu", [&] {
      const scalar_t* xp = x.data_ptr<scalar_t>();
      scalar_t* yp = y.data_ptr<scalar_t>();
      scalar_t* dp = dydx.data_ptr<scalar_t>();
      at::parallel_for(0, x.numel(), kGeluGrain,
                       [&](std::int64_t b, std::int64_t e) { gelu_derivative_kernel(xp, b, e, yp, dp); });
    });
    ctx->save_for_backward({dydx});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto dydx = ctx->get_saved_variables()[0];
    const auto g = grad_outputs[0].to(dydx.scalar_type());
    // One elementwise product: LibTorch's vectorised mul in float and double (the saved tensor is
    // contiguous); in bf16 arcal's loop, which rounds the float product as LibTorch's bf16 mul does
    // at a third of its dispatch and conversion cost.
    if (dydx.scalar_type() != at::kBFloat16) return {g * dydx};
    const auto gc = g.contiguous();
    auto dx = torch::empty_like(dydx);
    const auto* gp = reinterpret_cast<const std::uint16_t*>(gc.data_ptr<at::BFloat16>());
    const auto* dp = reinterpret_cast<const std::uint16_t*>(dydx.data_ptr<at::BFloat16>());
    auto* xp = reinterpret_cast<std::uint16_t*>(dx.data_ptr<at::BFloat16>());
    at::parallel_for(0, dx.numel(), kGeluGrain, [&](std::int64_t b, std::int64_t e) { bf16_product(gp, dp, b, e, xp); });
    return {dx};
  }
};

// ---- LayerNorm over the last axis ---------------------------------------------------------------
// y = (x - mean) rstd w + b for each row of d values, rstd = 1 / sqrt(var + eps) with the biased
// variance (two passes over the row). Backward, with xhat = (x - mean) rstd and g = dy w:
// dx = rstd (g - mean(g) - xhat mean(g xhat)), dw = sum over rows of dy xhat, db = sum of dy. The
// row sums go by blocks of kNormBlock rows whose partial sums are added in block order, so the
// gradients are the same on any thread count. LibTorch's layer_norm took 0.42 ms forward + backward
// at (2176, 64), 13 calls per AR-ViT-tiny step.
constexpr std::int64_t kNormBlock = 64;

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
                                         std::int64_t r0, std::int64_t r1, std::int64_t d, T eps,
                                         Y* __restrict y, T* __restrict mean, T* __restrict rstd) {
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
ARCAL_ALWAYS_INLINE void layer_norm_backward_rows(const T* __restrict x, const T* __restrict w,
                                                  const G* __restrict dy, const T* __restrict mean,
                                                  const T* __restrict rstd, std::int64_t r0, std::int64_t r1,
                                                  std::int64_t d, T* __restrict dx, T* __restrict dw_part,
                                                  T* __restrict db_part) {
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

struct LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
  // bf16_out (float x only): y in bf16.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in, const torch::Tensor& w_in,
                               const torch::Tensor& b_in, double eps, bool bf16_out) {
    auto x = x_in.contiguous();
    auto w = w_in.contiguous(), b = b_in.contiguous();
    const std::int64_t d = x.size(-1), rows = x.numel() / d;  // d >= 1 (fused_layer_norm checks)
    auto y = bf16_out ? torch::empty_like(x, x.options().dtype(torch::kBFloat16)) : torch::empty_like(x);
    auto mean = torch::empty({rows}, x.options()), rstd = torch::empty({rows}, x.options());
    const std::int64_t blocks = (rows + kNormBlock - 1) / kNormBlock;
    auto run = [&](const auto* xp, const auto* wp, const auto* bp, auto* yp, auto* mp, auto* rp) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
      at::parallel_for(0, blocks, norm_block_grain(d), [&](std::int64_t b0, std::int64_t b1) {
        layer_norm_kernel(xp, wp, bp, b0 * kNormBlock, std::min(rows, b1 * kNormBlock), d, T(eps), yp, mp, rp);
      });
    };
    if (bf16_out)  // float x (fused_layer_norm checks)
      run(x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(),
          reinterpret_cast<std::uint16_t*>(y.data_ptr<at::BFloat16>()), mean.data_ptr<float>(), rstd.data_ptr<float>());
    else
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_layer_norm", [&] {
        run(x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
            mean.data_ptr<scalar_t>(), rstd.data_ptr<scalar_t>());
      });
    ctx->save_for_backward({x, w, mean, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    // A bf16 gradient of a float norm (its bf16 output fed a linear) is read as it is.
    const bool bf16_dy = x.scalar_type() == torch::kFloat && grad_outputs[0].scalar_type() == torch::kBFloat16;
    const auto dy = (bf16_dy ? grad_outputs[0] : grad_outputs[0].to(x.scalar_type())).contiguous();
    const std::int64_t d = x.size(-1), rows = mean.numel();
    const std::int64_t blocks = (rows + kNormBlock - 1) / kNormBlock;
    auto dx = torch::empty_like(x);
    auto partial = torch::zeros({std::max<std::int64_t>(blocks, 1), 2, d}, x.options());  // [block] dw, db
    auto run = [&](const auto* xp, const auto* gp) {
      using T = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
      const T *wp = w.data_ptr<T>(), *mp = mean.data_ptr<T>(), *rp = rstd.data_ptr<T>();
      T *dp = dx.data_ptr<T>(), *pp = partial.data_ptr<T>();
      at::parallel_for(0, blocks, norm_block_grain(d), [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t blk = b0; blk < b1; ++blk)
          layer_norm_backward_kernel(xp, wp, gp, mp, rp, blk * kNormBlock, std::min(rows, (blk + 1) * kNormBlock), d,
                                     dp, pp + blk * 2 * d, pp + blk * 2 * d + d);
      });
    };
    if (bf16_dy)
      run(x.data_ptr<float>(), reinterpret_cast<const std::uint16_t*>(dy.data_ptr<at::BFloat16>()));
    else
      AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_layer_norm_backward",
                                 [&] { run(x.data_ptr<scalar_t>(), dy.data_ptr<scalar_t>()); });
    auto sums = torch::zeros({2, d}, x.options());  // dw, db
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fused_layer_norm_sums", [&] {
      add_block_partials(partial.data_ptr<scalar_t>(), blocks, 2 * d, sums.data_ptr<scalar_t>());
    });
    return {dx, sums[0], sums[1], torch::Tensor(), torch::Tensor()};
  }
};

// ---- self-attention core: one (image, head) pair at a time ------------------------------------
// q, k, v point at row 0 of the head's columns; rows are ld apart (3D in the packed projection).
// P (T x np) receives the attention weights, its rows padded to np = T rounded up to a multiple of 8
// (padded_tokens) with weight 0, so that every loop over keys runs in whole vectors: at 17 tokens an
// unpadded row is two vectors and a scalar remainder, and the remainder's exp costs as much as a
// vector's. out rows are ldo apart (D).

inline std::int64_t padded_tokens(std::int64_t n) { return (n + 7) / 8 * 8; }

// xt (hd x np): x's n rows transposed, columns n..np-1 zero.
template <typename T>
ARCAL_ALWAYS_INLINE void transpose_head(const T* x, std::int64_t ld, int n, int np, int hd, T* __restrict xt) {
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < hd; ++c) xt[c * np + j] = x[j * ld + c];
  for (int c = 0; c < hd; ++c)
    for (int j = n; j < np; ++j) xt[c * np + j] = 0;
}

// out (n x np) = a b^T for two heads' rows (n x hd, rows lda / ldb apart): out[i][j] = a_i . b_j (0 for
// j >= n), built column by column of the head dimension so that row i is updated again only after
// the other n-1 rows. bt (hd x np) is scratch for b held transposed, so every update runs over
// contiguous j in whole vectors.
template <typename T, int HD>
ARCAL_ALWAYS_INLINE void head_products(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, int n, int np,
                                       int hd_runtime, T* __restrict out, T* __restrict bt) {
  const int hd = HD > 0 ? HD : hd_runtime;
  transpose_head(b, ldb, n, np, hd, bt);
  const std::int64_t nn = std::int64_t(n) * np;
#pragma omp simd
  for (std::int64_t e = 0; e < nn; ++e) out[e] = 0;
  for (int c = 0; c < hd; ++c) {
    const T* __restrict bc = bt + c * np;
    for (int i = 0; i < n; ++i) {
      const T aic = a[i * lda + c];
      T* __restrict o = out + std::int64_t(i) * np;
#pragma omp simd
      for (int j = 0; j < np; ++j) o[j] += aic * bc[j];
    }
  }
}

// Loop orders keep every vector update independent of the one before it: score matrices come from
// head_products, output rows accumulate key by key with the rows in between, and the backward splits
// dq (accumulated over keys) from dk and dv (accumulated over queries). Kt and Vt are head_products'
// scratch. HD > 0 fixes the head dimension at
// compile time (unrolled loops); HD = 0 reads it from hd.
template <typename T, int HD>
ARCAL_ALWAYS_INLINE void attention_head_forward(const T* q, const T* k, const T* v, std::int64_t ld, int n,
                                                int hd_runtime, T scale, bool causal, T* __restrict P, T* out,
                                                std::int64_t ldo, T* __restrict Kt) {
  const int hd = HD > 0 ? HD : hd_runtime;
  const int np = int(padded_tokens(n));
  head_products<T, HD>(q, ld, k, ld, n, np, hd, P, Kt);  // raw scores q_i . k_j
  for (int i = 0; i < n; ++i) {
    T* __restrict p = P + std::int64_t(i) * np;
    T mx = -std::numeric_limits<T>::infinity();
    const int last = causal ? i : n - 1;  // keys after `last` (and the padding) get weight exactly 0
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < np; ++j) {
      p[j] = j > last ? -std::numeric_limits<T>::infinity() : p[j] * scale;
      mx = p[j] > mx ? p[j] : mx;
    }
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < np; ++j) {
      p[j] = exp_shifted<T>(p[j] - mx);
      sum += p[j];
    }
    const T inv = T(1) / sum;
#pragma omp simd
    for (int j = 0; j < np; ++j) p[j] *= inv;
    T* __restrict oi = out + i * ldo;
#pragma omp simd
    for (int c = 0; c < hd; ++c) oi[c] = 0;
  }
  for (int j = 0; j < n; ++j) {
    const T* __restrict vj = v + j * ld;
    for (int i = 0; i < n; ++i) {
      const T pij = P[std::int64_t(i) * np + j];
      T* __restrict oi = out + i * ldo;
#pragma omp simd
      for (int c = 0; c < hd; ++c) oi[c] += pij * vj[c];
    }
  }
}

// dq, dk, dv (same layout as q, k, v) must start at zero (attention_backward_heads zeroes them);
// dS (n x n) and Vt (hd x n) are scratch.
template <typename T, int HD>
ARCAL_ALWAYS_INLINE void attention_head_backward(const T* q, const T* k, const T* v, std::int64_t ld, int n,
                                                 int hd_runtime, T scale, const T* __restrict P, const T* g,
                                                 std::int64_t ldo, T* dq, T* dk, T* dv, T* __restrict dS,
                                                 T* __restrict Vt) {
  const int hd = HD > 0 ? HD : hd_runtime;
  const int np = int(padded_tokens(n));
  head_products<T, HD>(g, ldo, v, ld, n, np, hd, dS, Vt);  // dP_ij = g_i . v_j
  for (int i = 0; i < n; ++i) {  // dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij') / sqrt(hd); 0 on the padding
    const T* __restrict p = P + std::int64_t(i) * np;
    T* __restrict d = dS + std::int64_t(i) * np;
    T r = 0;
#pragma omp simd reduction(+ : r)
    for (int j = 0; j < np; ++j) r += p[j] * d[j];
#pragma omp simd
    for (int j = 0; j < np; ++j) d[j] = p[j] * (d[j] - r) * scale;
  }
  for (int i = 0; i < n; ++i) {  // dk_j += dS_ij q_i, dv_j += P_ij g_i
    const T* __restrict qi = q + i * ld;
    const T* __restrict gi = g + i * ldo;
    for (int j = 0; j < n; ++j) {
      const T sij = dS[std::int64_t(i) * np + j], pij = P[std::int64_t(i) * np + j];
      T* __restrict dkj = dk + j * ld;
      T* __restrict dvj = dv + j * ld;
#pragma omp simd
      for (int c = 0; c < hd; ++c) {
        dkj[c] += sij * qi[c];
        dvj[c] += pij * gi[c];
      }
    }
  }
  for (int j = 0; j < n; ++j) {  // dq_i += dS_ij k_j
    const T* __restrict kj = k + j * ld;
    for (int i = 0; i < n; ++i) {
      const T sij = dS[std::int64_t(i) * np + j];
      T* __restrict dqi = dq + i * ld;
#pragma omp simd
      for (int c = 0; c < hd; ++c) dqi[c] += sij * kj[c];
    }
  }
}

struct AttentionShape {
  std::int64_t B, T, D, H, hd;
  bool causal;  ///< query i sees keys j <= i only
};

template <typename T, int HD>
ARCAL_ALWAYS_INLINE void attention_forward_heads(const T* qkv, const AttentionShape& s, std::int64_t begin,
                                                 std::int64_t end, T* P, T* out) {
  const std::int64_t ld = 3 * s.D;
  const T scale = T(1) / std::sqrt(T(s.hd));
  const std::int64_t np = padded_tokens(s.T);
  std::vector<T> kt(static_cast<std::size_t>(np * s.hd));
  for (std::int64_t bh = begin; bh < end; ++bh) {
    const std::int64_t b = bh / s.H, h = bh % s.H;
    const T* q = qkv + b * s.T * ld + h * s.hd;
    attention_head_forward<T, HD>(q, q + s.D, q + 2 * s.D, ld, int(s.T), int(s.hd), scale, s.causal,
                                  P + bh * s.T * np, out + b * s.T * s.D + h * s.hd, s.D, kt.data());
  }
}

template <typename T, int HD>
ARCAL_ALWAYS_INLINE void attention_backward_heads(const T* qkv, const AttentionShape& s, const T* P, const T* g,
                                                  std::int64_t begin, std::int64_t end, T* dqkv) {
  const std::int64_t ld = 3 * s.D;
  const T scale = T(1) / std::sqrt(T(s.hd));
  const std::int64_t np = padded_tokens(s.T);
  std::vector<T> ds(static_cast<std::size_t>(s.T * np)), vt(static_cast<std::size_t>(np * s.hd));
  for (std::int64_t bh = begin; bh < end; ++bh) {
    const std::int64_t b = bh / s.H, h = bh % s.H;
    const std::int64_t off = b * s.T * ld + h * s.hd;
    const T* q = qkv + off;
    T* dq = dqkv + off;
    const std::int64_t hd = HD > 0 ? HD : s.hd;
    for (std::int64_t t = 0; t < s.T; ++t)  // this head's gradient columns, zeroed while in cache
      for (int part = 0; part < 3; ++part) {
        T* __restrict z = dq + t * ld + part * s.D;  // a loop, not memset: 16-float spans, 51 per head
#pragma omp simd
        for (std::int64_t c = 0; c < hd; ++c) z[c] = 0;
      }
    attention_head_backward<T, HD>(q, q + s.D, q + 2 * s.D, ld, int(s.T), int(s.hd), scale, P + bh * s.T * np,
                                   g + b * s.T * s.D + h * s.hd, s.D, dq, dq + s.D, dq + 2 * s.D, ds.data(),
                                   vt.data());
  }
}

// The head dimensions of the presets (16: ViT-tiny, 32, 64) get their own compiled loops.
template <typename T>
ARCAL_ALWAYS_INLINE void attention_forward_range(const T* qkv, const AttentionShape& s, std::int64_t begin,
                                                 std::int64_t end, T* P, T* out) {
  switch (s.hd) {
    case 16: return attention_forward_heads<T, 16>(qkv, s, begin, end, P, out);
    case 32: return attention_forward_heads<T, 32>(qkv, s, begin, end, P, out);
    case 64: return attention_forward_heads<T, 64>(qkv, s, begin, end, P, out);
    default: return attention_forward_heads<T, 0>(qkv, s, begin, end, P, out);
  }
}

template <typename T>
ARCAL_ALWAYS_INLINE void attention_backward_range(const T* qkv, const AttentionShape& s, const T* P, const T* g,
                                                  std::int64_t begin, std::int64_t end, T* dqkv) {
  switch (s.hd) {
    case 16: return attention_backward_heads<T, 16>(qkv, s, P, g, begin, end, dqkv);
    case 32: return attention_backward_heads<T, 32>(qkv, s, P, g, begin, end, dqkv);
    case 64: return attention_backward_heads<T, 64>(qkv, s, P, g, begin, end, dqkv);
    default: return attention_backward_heads<T, 0>(qkv, s, P, g, begin, end, dqkv);
  }
}

// ---- self-attention core for short sequences: 8 images per pass, one in each vector lane ------
// At 17 tokens x 16 dimensions a head's matrices are too small for a vector to run along any of
// their axes without remainders and horizontal sums. Here the 8 lanes hold the same (token,
// dimension) entry of 8 images, so every product, the softmax and every gradient are plain
// lane-wise vector arithmetic. Used when T <= kLaneMaxTokens; P is then stored lane-interleaved as
// (ceil(B/8), H, T, T, 8), and the backward (chosen by the same rule) reads it so.
constexpr int kLanes = 8;
constexpr std::int64_t kLaneMaxTokens = 32;
static_assert(kLanes == 8, "the lane layout moves 8 x 8 float blocks (LaneVec)");

inline bool lane_path(const AttentionShape& s) { return s.T <= kLaneMaxTokens; }

// X[(t*hd + c)*8 + l] = column block `col` (hd wide) of row t of image b0 + l in x (rows ld apart,
// images T*ld apart); lanes past `lanes` are zero. x's storage S may be narrower than the arithmetic
// type T (bf16 under autocast, widened exactly here); lane_scatter rounds back to S (widen/store).
// In float, the gather and the scatter move 8 x 8 blocks (8 images' rows of 8 dimensions) with
// the vector transpose above: a head's rows are contiguous in each image, the lane layout wants them
// across images, and element by element the moves cost more than the attention's arithmetic (57 % of
// the backward at 17 tokens x 16 dimensions).
template <typename T, typename S>
ARCAL_ALWAYS_INLINE void lane_gather(const S* x, std::int64_t ld, std::int64_t T_, std::int64_t b0, int lanes,
                                     std::int64_t col, int hd, T* __restrict X) {
  if constexpr (std::is_same_v<T, float>) {
    if (hd % 8 == 0) {
      for (std::int64_t t = 0; t < T_; ++t)
        for (int c0 = 0; c0 < hd; c0 += 8) {
          LaneVec r[8];
          for (int l = 0; l < kLanes; ++l) {
            r[l] = LaneVec{};
            if (l < lanes) lane_load8(x + ((b0 + l) * T_ + t) * ld + col + c0, r[l]);
          }
          lane_transpose8(r);
          for (int k = 0; k < 8; ++k) lane_store8(X + (t * hd + c0 + k) * kLanes, r[k]);
        }
      return;
    }
  }
  const std::int64_t n = T_ * hd;
  for (int l = 0; l < kLanes; ++l) {
    if (l >= lanes) {
      for (std::int64_t e = 0; e < n; ++e) X[e * kLanes + l] = 0;
      continue;
    }
    const S* src = x + (b0 + l) * T_ * ld + col;
    for (std::int64_t t = 0; t < T_; ++t)
      for (int c = 0; c < hd; ++c) X[(t * hd + c) * kLanes + l] = widen(src[t * ld + c]);
  }
}

template <typename T, typename S>
ARCAL_ALWAYS_INLINE void lane_scatter(const T* __restrict X, std::int64_t T_, std::int64_t b0, int lanes,
                                      std::int64_t col, int hd, S* y, std::int64_t ld) {
  if constexpr (std::is_same_v<T, float>) {
    if (hd % 8 == 0) {
      for (std::int64_t t = 0; t < T_; ++t)
        for (int c0 = 0; c0 < hd; c0 += 8) {
          LaneVec r[8];
          for (int k = 0; k < 8; ++k) lane_load8(X + (t * hd + c0 + k) * kLanes, r[k]);
          lane_transpose8(r);
          for (int l = 0; l < lanes; ++l) lane_store8(y + ((b0 + l) * T_ + t) * ld + col + c0, r[l]);
        }
      return;
    }
  }
  for (int l = 0; l < lanes; ++l) {
    S* dst = y + (b0 + l) * T_ * ld + col;
    for (std::int64_t t = 0; t < T_; ++t)
      for (int c = 0; c < hd; ++c) store(dst[t * ld + c], X[(t * hd + c) * kLanes + l]);
  }
}

// Scratch of one worker: Q, K, V, G, O / dQ, dK, dV (T*hd*8 each) and S (T*T*8).
template <typename T>
struct LaneScratch {
  std::vector<T> q, k, v, g, o, dk, dv, s;
  LaneScratch(std::int64_t n, std::int64_t hd)
      : q(std::size_t(n * hd * kLanes)), k(q.size()), v(q.size()), g(q.size()), o(q.size()), dk(q.size()),
        dv(q.size()), s(std::size_t(n * n * kLanes)) {}
};

// out[c*8 + l] (c < hd, one head's row in lane layout) = sum_{j < cnt} w[j*ws + l] X[j*xs + c*8 + l]: the
// row is built in blocks of CB dimensions held in registers across the whole sum over j (CB*8
// values: 8 vectors of floats or doubles' halves), so the loop stores nothing until a block is done.
template <typename T>
ARCAL_ALWAYS_INLINE void lane_weighted_rows(const T* w, std::int64_t ws, const T* X, std::int64_t xs, std::int64_t cnt,
                                            int hd, T* __restrict out) {
  constexpr int CB = 32 / int(sizeof(T));
  int c0 = 0;
  for (; c0 + CB <= hd; c0 += CB) {
    T acc[CB * kLanes] = {};
    for (std::int64_t j = 0; j < cnt; ++j) {
      const T* wj = w + j * ws;
      const T* xj = X + j * xs + c0 * kLanes;
      for (int c = 0; c < CB; ++c)
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) acc[c * kLanes + l] += wj[l] * xj[c * kLanes + l];
    }
    for (int e = 0; e < CB * kLanes; ++e) out[c0 * kLanes + e] = acc[e];
  }
  for (; c0 < hd; ++c0) {  // head widths that are not a multiple of CB
    T acc[kLanes] = {};
    for (std::int64_t j = 0; j < cnt; ++j)
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) acc[l] += w[j * ws + l] * X[j * xs + c0 * kLanes + l];
    for (int l = 0; l < kLanes; ++l) out[c0 * kLanes + l] = acc[l];
  }
}

// out[j*8 + l] (j < cnt - cnt % 4) = sum_{c < hd} a[c*8 + l] B[(j*hd + c)*8 + l]: one row's dot
// products with the rows of B in whole blocks of four, in lane layout (lane_tail_dots does the rest). Four
// rows of B go at once, each with its own accumulator, so four independent multiply-add chains fill
// the pipeline where one chain waits on the adder's latency; every dot product still adds its terms
// in c order, so each value is bitwise the one-at-a-time sum.
template <typename T>
ARCAL_ALWAYS_INLINE void lane_row_dots4(const T* __restrict a, const T* __restrict B, std::int64_t cnt, int hd,
                                        T* __restrict out) {
  const std::int64_t row = std::int64_t(hd) * kLanes;
  for (std::int64_t j = 0; j + 4 <= cnt; j += 4) {
    T a0[kLanes] = {}, a1[kLanes] = {}, a2[kLanes] = {}, a3[kLanes] = {};
    const T* b0 = B + j * row;
    const T* b1 = b0 + row;
    const T* b2 = b1 + row;
    const T* b3 = b2 + row;
    for (int c = 0; c < hd; ++c) {
      const std::int64_t o = std::int64_t(c) * kLanes;
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        const T x = a[o + l];
        a0[l] += x * b0[o + l];
        a1[l] += x * b1[o + l];
        a2[l] += x * b2[o + l];
        a3[l] += x * b3[o + l];
      }
    }
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      out[j * kLanes + l] = a0[l];
      out[(j + 1) * kLanes + l] = a1[l];
      out[(j + 2) * kLanes + l] = a2[l];
      out[(j + 3) * kLanes + l] = a3[l];
    }
  }
}
// The remaining dot products, keys [j0, cnt), of RB rows of A at once (rows `row` apart, their outputs
// `col` apart): RB independent chains per key where one row alone would wait on one (17 keys: the
// 17th). Same terms in the same order as above.
template <int RB, typename T>
ARCAL_ALWAYS_INLINE void lane_tail_dots(const T* __restrict A, const T* __restrict B, std::int64_t j0, std::int64_t cnt,
                                        int hd, std::int64_t col, T* __restrict out) {
  const std::int64_t row = std::int64_t(hd) * kLanes;
  for (std::int64_t j = j0; j < cnt; ++j) {
    T acc[RB][kLanes] = {};
    const T* bj = B + j * row;
    for (int c = 0; c < hd; ++c)
      for (int r = 0; r < RB; ++r)
#pragma omp simd
        for (int l = 0; l < kLanes; ++l) acc[r][l] += A[r * row + c * kLanes + l] * bj[c * kLanes + l];
    for (int r = 0; r < RB; ++r)
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) out[r * col + j * kLanes + l] = acc[r][l];
  }
}
// Rows i0..i0+RB-1 of A against the first cnt rows of B: out row r (col apart) = lane_row_dots4's
// blocks, then the tail for the RB rows together.
template <int RB, typename T>
ARCAL_ALWAYS_INLINE void lane_block_dots(const T* A, const T* B, std::int64_t cnt, int hd, std::int64_t col, T* out) {
  const std::int64_t row = std::int64_t(hd) * kLanes;
  for (int r = 0; r < RB; ++r) lane_row_dots4(A + r * row, B, cnt, hd, out + r * col);
  lane_tail_dots<RB>(A, B, cnt - cnt % 4, cnt, hd, col, out);
}

// The group of image-head pair gh (gh = group * H + head): its first image, its filled lanes and its
// head, with the head's q, k and v gathered into lane layout.
struct LaneGroup {
  std::int64_t b0, h;
  int lanes;
};

template <typename T, typename S>
ARCAL_ALWAYS_INLINE LaneGroup lane_load_qkv(const S* qkv, const AttentionShape& s, std::int64_t gh, int hd, T* Q, T* K,
                                            T* V) {
  const std::int64_t grp = gh / s.H, h = gh % s.H, b0 = grp * kLanes, ld = 3 * s.D;
  const int lanes = int(std::min<std::int64_t>(kLanes, s.B - b0));
  lane_gather(qkv, ld, s.T, b0, lanes, h * s.hd, hd, Q);
  lane_gather(qkv, ld, s.T, b0, lanes, s.D + h * s.hd, hd, K);
  lane_gather(qkv, ld, s.T, b0, lanes, 2 * s.D + h * s.hd, hd, V);
  return {b0, h, lanes};
}

// Query rows i0..i0+RB-1 of one lane group, each seeing keys [0, cnt): scores into P's rows
// (scaled, softmaxed, the masked keys exactly 0) and o_i = sum_j P_ij v_j. Each row's arithmetic is
// that of the row alone, in the same order; RB rows only interleave their dependency chains (the
// tail dot products, the running max and sum over the keys).
template <int RB, typename T>
ARCAL_ALWAYS_INLINE void lane_forward_rows(const T* Q, const T* K, const T* V, std::int64_t i0, std::int64_t cnt,
                                           std::int64_t n, int hd, T scale, T* __restrict Pg, T* __restrict O) {
  const std::int64_t row = std::int64_t(hd) * kLanes, col = n * kLanes;
  T* __restrict p = Pg + i0 * col;
  lane_block_dots<RB>(Q + i0 * row, K, cnt, hd, col, p);  // q_i . k_j
  T mx[RB][kLanes], sum[RB][kLanes];
  for (int r = 0; r < RB; ++r)
    for (int l = 0; l < kLanes; ++l) mx[r][l] = -std::numeric_limits<T>::infinity(), sum[r][l] = 0;
  for (std::int64_t j = 0; j < cnt; ++j)
    for (int r = 0; r < RB; ++r)
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        T& x = p[r * col + j * kLanes + l];
        x *= scale;
        mx[r][l] = std::max(mx[r][l], x);
      }
  for (std::int64_t j = 0; j < cnt; ++j)
    for (int r = 0; r < RB; ++r)
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        T& x = p[r * col + j * kLanes + l];
        const T e = exp_shifted<T>(x - mx[r][l]);
        x = e;
        sum[r][l] += e;
      }
  for (int r = 0; r < RB; ++r)
    for (int l = 0; l < kLanes; ++l) sum[r][l] = T(1) / sum[r][l];
  for (std::int64_t j = 0; j < cnt; ++j)
    for (int r = 0; r < RB; ++r)
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) p[r * col + j * kLanes + l] *= sum[r][l];
  for (int r = 0; r < RB; ++r)
    for (std::int64_t j = cnt; j < n; ++j)  // masked keys: weight exactly 0
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) p[r * col + j * kLanes + l] = 0;
  for (int r = 0; r < RB; ++r)  // o_i = sum_j P_ij v_j
    lane_weighted_rows(p + r * col, kLanes, V, row, cnt, hd, O + (i0 + r) * row);
}

// Rows i0..i0+RB-1 of dS = P (dP - r) / sqrt(hd), dP_ij = g_i . v_j, r_i = sum_j P_ij dP_ij, over the
// keys [0, cnt) each row sees (the rest exactly 0); each row's arithmetic in its own order, as above.
template <int RB, typename T>
ARCAL_ALWAYS_INLINE void lane_score_grad_rows(const T* G, const T* V, const T* Pg, std::int64_t i0, std::int64_t cnt,
                                              std::int64_t n, int hd, T scale, T* __restrict dS) {
  const std::int64_t row = std::int64_t(hd) * kLanes, col = n * kLanes;
  const T* p = Pg + i0 * col;
  T* __restrict ds = dS + i0 * col;
  lane_block_dots<RB>(G + i0 * row, V, cnt, hd, col, ds);  // dP_ij = g_i . v_j
  T rs[RB][kLanes] = {};
  for (std::int64_t j = 0; j < cnt; ++j)
    for (int r = 0; r < RB; ++r)
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) rs[r][l] += p[r * col + j * kLanes + l] * ds[r * col + j * kLanes + l];
  for (std::int64_t j = 0; j < cnt; ++j)
    for (int r = 0; r < RB; ++r)
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) {
        const std::int64_t e = r * col + j * kLanes + l;
        ds[e] = p[e] * (ds[e] - rs[r][l]) * scale;
      }
  for (int r = 0; r < RB; ++r)
    for (std::int64_t j = cnt; j < n; ++j)
#pragma omp simd
      for (int l = 0; l < kLanes; ++l) ds[r * col + j * kLanes + l] = 0;
}

template <typename T, int HD, typename S>
ARCAL_ALWAYS_INLINE void lane_forward(const S* qkv, const AttentionShape& s, std::int64_t begin, std::int64_t end,
                                      T* P, S* out) {
  const int hd = HD > 0 ? HD : int(s.hd);
  const std::int64_t n = s.T;
  const T scale = T(1) / std::sqrt(T(hd));
  LaneScratch<T> w(n, hd);
  T* __restrict Q = w.q.data();
  T* __restrict K = w.k.data();
  T* __restrict V = w.v.data();
  T* __restrict O = w.o.data();
  for (std::int64_t gh = begin; gh < end; ++gh) {
    const auto [b0, h, lanes] = lane_load_qkv(qkv, s, gh, hd, Q, K, V);
    T* __restrict Pg = P + gh * n * n * kLanes;
    std::int64_t i = 0;  // without a causal mask, four query rows at a time (their chains interleave)
    if (!s.causal)
      for (; i + 4 <= n; i += 4) lane_forward_rows<4>(Q, K, V, i, n, n, hd, scale, Pg, O);
    for (; i < n; ++i) lane_forward_rows<1>(Q, K, V, i, s.causal ? i + 1 : n, n, hd, scale, Pg, O);
    lane_scatter(O, n, b0, lanes, h * s.hd, hd, out, s.D);
  }
}

template <typename T, int HD, typename S>
ARCAL_ALWAYS_INLINE void lane_backward(const S* qkv, const AttentionShape& s, const T* P, const S* grad,
                                       std::int64_t begin, std::int64_t end, S* dqkv) {
  const int hd = HD > 0 ? HD : int(s.hd);
  const std::int64_t ld = 3 * s.D, n = s.T;
  const T scale = T(1) / std::sqrt(T(hd));
  LaneScratch<T> w(n, hd);
  T* __restrict Q = w.q.data();
  T* __restrict K = w.k.data();
  T* __restrict V = w.v.data();
  T* __restrict G = w.g.data();
  T* __restrict dQ = w.o.data();
  T* __restrict dK = w.dk.data();
  T* __restrict dV = w.dv.data();
  T* __restrict dS = w.s.data();
  for (std::int64_t gh = begin; gh < end; ++gh) {
    const auto [b0, h, lanes] = lane_load_qkv(qkv, s, gh, hd, Q, K, V);
    lane_gather(grad, s.D, n, b0, lanes, h * s.hd, hd, G);
    const T* __restrict Pg = P + gh * n * n * kLanes;
    std::int64_t i = 0;  // dS, four query rows at a time without a causal mask
    if (!s.causal)
      for (; i + 4 <= n; i += 4) lane_score_grad_rows<4>(G, V, Pg, i, n, n, hd, scale, dS);
    for (; i < n; ++i) lane_score_grad_rows<1>(G, V, Pg, i, s.causal ? i + 1 : n, n, hd, scale, dS);
    const std::int64_t row = hd * kLanes, col = n * kLanes;
    for (std::int64_t i = 0; i < n; ++i)  // dq_i = sum_j dS_ij k_j over the keys i sees
      lane_weighted_rows(dS + i * col, kLanes, K, row, s.causal ? i + 1 : n, hd, dQ + i * row);
    for (std::int64_t j = 0; j < n; ++j) {  // dk_j = sum_i dS_ij q_i, dv_j = sum_i P_ij g_i over the queries that see j
      const std::int64_t i0 = s.causal ? j : 0;
      lane_weighted_rows(dS + i0 * col + j * kLanes, col, Q + i0 * row, row, n - i0, hd, dK + j * row);
      lane_weighted_rows(Pg + i0 * col + j * kLanes, col, G + i0 * row, row, n - i0, hd, dV + j * row);
    }
    lane_scatter(dQ, n, b0, lanes, h * s.hd, hd, dqkv, ld);
    lane_scatter(dK, n, b0, lanes, s.D + h * s.hd, hd, dqkv, ld);
    lane_scatter(dV, n, b0, lanes, 2 * s.D + h * s.hd, hd, dqkv, ld);
  }
}

template <typename T, typename S>
ARCAL_ALWAYS_INLINE void lane_forward_range(const S* qkv, const AttentionShape& s, std::int64_t b, std::int64_t e,
                                            T* P, S* out) {
  switch (s.hd) {
    case 16: return lane_forward<T, 16>(qkv, s, b, e, P, out);
    case 32: return lane_forward<T, 32>(qkv, s, b, e, P, out);
    default: return lane_forward<T, 0>(qkv, s, b, e, P, out);
  }
}
template <typename T, typename S>
ARCAL_ALWAYS_INLINE void lane_backward_range(const S* qkv, const AttentionShape& s, const T* P, const S* g,
                                             std::int64_t b, std::int64_t e, S* dqkv) {
  switch (s.hd) {
    case 16: return lane_backward<T, 16>(qkv, s, P, g, b, e, dqkv);
    case 32: return lane_backward<T, 32>(qkv, s, P, g, b, e, dqkv);
    default: return lane_backward<T, 0>(qkv, s, P, g, b, e, dqkv);
  }
}
// bf16 qkv, output and gradients (under autocast the projections around the core are bf16), float
// arithmetic and P: the lane path only (T <= kLaneMaxTokens; fused_self_attention converts longer
// sequences to float). The values are bitwise those of the float kernel on the widened qkv with its
// output rounded to bf16, which is what the conversions around it gave before.
ARCAL_FUSED_CLONES void attention_forward_bf16(const std::uint16_t* qkv, const AttentionShape& s, std::int64_t b,
                                               std::int64_t e, float* P, std::uint16_t* out) {
  lane_forward_range(qkv, s, b, e, P, out);
}
ARCAL_FUSED_CLONES void attention_backward_bf16(const std::uint16_t* qkv, const AttentionShape& s, const float* P,
                                                const std::uint16_t* g, std::int64_t b, std::int64_t e,
                                                std::uint16_t* dqkv) {
  lane_backward_range(qkv, s, P, g, b, e, dqkv);
}

// [b, e) counts (image group, head) pairs on the lane path, (image, head) pairs otherwise.
ARCAL_FUSED_CLONES void attention_forward_f(const float* qkv, const AttentionShape& s, std::int64_t b,
                                            std::int64_t e, float* P, float* out) {
  if (lane_path(s)) return lane_forward_range(qkv, s, b, e, P, out);
  attention_forward_range(qkv, s, b, e, P, out);
}
ARCAL_FUSED_CLONES void attention_forward_d(const double* qkv, const AttentionShape& s, std::int64_t b,
                                            std::int64_t e, double* P, double* out) {
  if (lane_path(s)) return lane_forward_range(qkv, s, b, e, P, out);
  attention_forward_range(qkv, s, b, e, P, out);
}
ARCAL_FUSED_CLONES void attention_backward_f(const float* qkv, const AttentionShape& s, const float* P,
                                             const float* g, std::int64_t b, std::int64_t e, float* dqkv) {
  if (lane_path(s)) return lane_backward_range(qkv, s, P, g, b, e, dqkv);
  attention_backward_range(qkv, s, P, g, b, e, dqkv);
}
ARCAL_FUSED_CLONES void attention_backward_d(const double* qkv, const AttentionShape& s, const double* P,
                                             const double* g, std::int64_t b, std::int64_t e, double* dqkv) {
  if (lane_path(s)) return lane_backward_range(qkv, s, P, g, b, e, dqkv);
  attention_backward_range(qkv, s, P, g, b, e, dqkv);
}

inline void attention_forward(const float* x, const AttentionShape& s, std::int64_t b, std::int64_t e,
                              float* P, float* out) {
  attention_forward_f(x, s, b, e, P, out);
}
inline void attention_forward(const double* x, const AttentionShape& s, std::int64_t b, std::int64_t e,
                              double* P, double* out) {
  attention_forward_d(x, s, b, e, P, out);
}
inline void attention_backward(const float* x, const AttentionShape& s, const float* P, const float* g,
                               std::int64_t b, std::int64_t e, float* dx) {
  attention_backward_f(x, s, P, g, b, e, dx);
}
inline void attention_backward(const double* x, const AttentionShape& s, const double* P, const double* g,
                               std::int64_t b, std::int64_t e, double* dx) {
  attention_backward_d(x, s, P, g, b, e, dx);
}

AttentionShape attention_shape(const torch::Tensor& qkv, std::int64_t heads, bool causal) {
  const std::int64_t D = qkv.size(2) / 3;
  return {qkv.size(0), qkv.size(1), D, heads, D / heads, causal};
}

struct SelfAttentionFunction : public torch::autograd::Function<SelfAttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& qkv_in, std::int64_t heads, bool causal) {
    auto qkv = qkv_in.contiguous();
    const auto s = attention_shape(qkv, heads, causal);
    auto out = torch::empty({s.B, s.T, s.D}, qkv.options());
    const bool lanes = lane_path(s);
    const std::int64_t groups = (s.B + kLanes - 1) / kLanes;
    // lanes: (groups, H, T, T, 8) interleaved; else (B, H, T, np) with rows padded with weight 0.
    // float for bf16 qkv (fused_self_attention sends bf16 here on the lane path only).
    const bool bf16 = qkv.scalar_type() == torch::kBFloat16;
    const auto popts = bf16 ? qkv.options().dtype(torch::kFloat) : qkv.options();
    auto P = lanes ? torch::empty({groups, s.H, s.T, s.T, kLanes}, popts)
                   : torch::empty({s.B, s.H, s.T, padded_tokens(s.T)}, popts);
    if (bf16) {
      const auto* x = reinterpret_cast<const std::uint16_t*>(qkv.data_ptr<at::BFloat16>());
      float* p = P.data_ptr<float>();
      auto* o = reinterpret_cast<std::uint16_t*>(out.data_ptr<at::BFloat16>());
      at::parallel_for(0, groups * s.H, 1,
                       [&](std::int64_t b, std::int64_t e) { attention_forward_bf16(x, s, b, e, p, o); });
    } else {
      AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "fused_self_attention", [&] {
        const scalar_t* x = qkv.data_ptr<scalar_t>();
        scalar_t* p = P.data_ptr<scalar_t>();
        scalar_t* o = out.data_ptr<scalar_t>();
        at::parallel_for(0, (lanes ? groups : s.B) * s.H, lanes ? 1 : 8,
                         [&](std::int64_t b, std::int64_t e) { attention_forward(x, s, b, e, p, o); });
      });
    }
    ctx->save_for_backward({qkv, P});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["causal"] = causal;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto& qkv = saved[0];
    const auto& P = saved[1];
    const auto s = attention_shape(qkv, ctx->saved_data["heads"].toInt(), ctx->saved_data["causal"].toBool());
    auto g = grad_outputs[0].to(qkv.scalar_type()).contiguous();
    auto dqkv = torch::empty_like(qkv);  // every entry is written: each head writes (or zeroes) its own columns
    if (qkv.scalar_type() == torch::kBFloat16) {  // the lane path (as the forward)
      const auto* x = reinterpret_cast<const std::uint16_t*>(qkv.data_ptr<at::BFloat16>());
      const float* p = P.data_ptr<float>();
      const auto* gp = reinterpret_cast<const std::uint16_t*>(g.data_ptr<at::BFloat16>());
      auto* dx = reinterpret_cast<std::uint16_t*>(dqkv.data_ptr<at::BFloat16>());
      at::parallel_for(0, (s.B + kLanes - 1) / kLanes * s.H, 1,
                       [&](std::int64_t b, std::int64_t e) { attention_backward_bf16(x, s, p, gp, b, e, dx); });
      return {dqkv, torch::Tensor(), torch::Tensor()};
    }
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "fused_self_attention_backward", [&] {
      const scalar_t* x = qkv.data_ptr<scalar_t>();
      const scalar_t* p = P.data_ptr<scalar_t>();
      const scalar_t* gp = g.data_ptr<scalar_t>();
      scalar_t* dx = dqkv.data_ptr<scalar_t>();
      const bool lanes = lane_path(s);  // as the forward chose: then P is lane-interleaved
      at::parallel_for(0, (lanes ? (s.B + kLanes - 1) / kLanes : s.B) * s.H, lanes ? 1 : 8,
                       [&](std::int64_t b, std::int64_t e) { attention_backward(x, s, p, gp, b, e, dx); });
    });
    return {dqkv, torch::Tensor(), torch::Tensor()};
  }
};

bool floating(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble;
}

}  // namespace

bool fused_operators_enabled() { return g_fused.enabled(); }

void set_fused_operators(bool enabled) { g_fused.set(enabled); }

bool fused_storage_dtype(torch::ScalarType t) {
  return t == torch::kFloat || t == torch::kDouble || t == torch::kBFloat16;
}

torch::Tensor fused_self_attention(const torch::Tensor& qkv, int heads, bool causal) {
  const char* fn = "fused_self_attention";
  if (qkv.dim() != 3 || qkv.size(2) % 3 != 0) throw_input(fn, "qkv must be (B,T,3D)");
  if (heads < 1 || (qkv.size(2) / 3) % heads != 0) throw_input(fn, "D must be a multiple of the number of heads");
  if (!fused_storage_dtype(qkv.scalar_type())) throw_input(fn, "qkv must be float, double or bfloat16");
  if (!qkv.device().is_cpu()) throw_input(fn, "CPU tensors only (the models use LibTorch's composite on other devices)");
  if (qkv.scalar_type() == torch::kBFloat16 && !lane_path(attention_shape(qkv, heads, causal)))
    return SelfAttentionFunction::apply(qkv.to(torch::kFloat), static_cast<std::int64_t>(heads), causal)
        .to(torch::kBFloat16);
  return SelfAttentionFunction::apply(qkv, static_cast<std::int64_t>(heads), causal);
}

torch::Tensor composite_self_attention(const torch::Tensor& qkv_in, int heads, bool causal) {
  const auto B = qkv_in.size(0), T = qkv_in.size(1), D = qkv_in.size(2) / 3, hd = D / heads;
  auto qkv = qkv_in.reshape({B, T, 3, heads, hd}).permute({2, 0, 3, 1, 4});  // (3,B,H,T,hd)
  auto scores = torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
  if (causal)
    scores = scores.masked_fill(torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool)).triu(1),
                                -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(scores, -1), qkv[2]).transpose(1, 2).reshape({B, T, D});
}

RoutingBank::RoutingBank() : bank_(c10::IValue::make_capsule(c10::make_intrusive<RoutingBankState>())) {}

namespace {
RoutingBankState& state_of(const c10::IValue& bank) {
  return *c10::static_intrusive_pointer_cast<RoutingBankState>(bank.toCapsule());
}
}  // namespace

int RoutingBank::add(const torch::Tensor& source) {
  const char* fn = "RoutingBank::add";
  if (source.dim() != 3) throw_input(fn, "a source must be (B,T,d)");
  if (!fused_storage_dtype(source.scalar_type()))
    throw_input(fn, "a source must be float, double or bfloat16");
  if (!source.device().is_cpu()) throw_input(fn, "CPU tensors only");
  if (!tapped_.empty() && (source.sizes() != tapped_[0].sizes() || bank_dtype(source) != bank_dtype(tapped_[0])))
    throw_input(fn, "source " + std::to_string(tapped_.size()) +
                        " must match source 0's shape and dtype (bfloat16 sources mix with float ones only)");
  const auto slot = static_cast<std::int64_t>(tapped_.size());
  auto& state = state_of(bank_);
  state.uses.emplace_back();
  state.rinv.emplace_back();
  state.rinv_eps.push_back(0.0);
  tapped_.push_back(SourceTapFunction::apply(source, bank_, slot));
  return static_cast<int>(slot);
}

std::pair<torch::Tensor, torch::Tensor> RoutingBank::route(const torch::Tensor& u, const std::vector<int>& slots,
                                                           double eps) {
  const char* fn = "RoutingBank::route";
  if (slots.empty()) throw_input(fn, "no sources");
  std::vector<torch::Tensor> v;
  std::vector<std::int64_t> ids;
  for (int s : slots) {
    if (s < 0 || s >= static_cast<int>(tapped_.size())) throw_input(fn, "slot " + std::to_string(s) + " was not added");
    v.push_back(tapped_[static_cast<std::size_t>(s)]);
    ids.push_back(s);
  }
  if (u.dim() != 1 || u.size(0) != v[0].size(2)) throw_input(fn, "the query must be (d) with d = the sources' width");
  if (u.scalar_type() != bank_dtype(v[0]))
    throw_input(fn, "the query must have the sources' dtype (float for bfloat16 sources)");
  auto out = RoutePointFunction::apply(u, torch::TensorList(v), bank_, std::move(ids), eps);
  return {out[0], out[1]};
}

torch::Tensor fused_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                               double eps, bool bf16_output) {
  const char* fn = "fused_layer_norm";
  if (x.dim() < 1 || x.size(-1) < 1) throw_input(fn, "x must have a non-empty last axis");
  if (!floating(x)) throw_input(fn, "x must be float or double");
  if (!x.device().is_cpu() || !weight.device().is_cpu() || !bias.device().is_cpu())
    throw_input(fn, "CPU tensors only (the models use LibTorch's layer_norm on other devices)");
  if (weight.dim() != 1 || bias.dim() != 1 || weight.size(0) != x.size(-1) || bias.size(0) != x.size(-1))
    throw_input(fn, "weight and bias must be (d,) with d = x.size(-1) = " + std::to_string(x.size(-1)));
  if (weight.scalar_type() != x.scalar_type() || bias.scalar_type() != x.scalar_type())
    throw_input(fn, "weight and bias must have x's dtype");
  if (!(eps >= 0.0)) throw_input(fn, "eps must be >= 0");
  if (bf16_output && x.scalar_type() != torch::kFloat) throw_input(fn, "a bf16 output is for a float x only");
  return LayerNormFunction::apply(x, weight, bias, eps, bf16_output);
}

torch::Tensor fused_gelu(const torch::Tensor& x) {
  if (!fused_storage_dtype(x.scalar_type())) throw_input("fused_gelu", "x must be float, double or bfloat16");
  if (!x.device().is_cpu()) throw_input("fused_gelu", "CPU tensors only (the models use LibTorch's gelu on other devices)");
  if (torch::GradMode::is_enabled() && x.requires_grad()) return GeluFunction::apply(x);
  return gelu_values(x);
}

}  // namespace arcal
