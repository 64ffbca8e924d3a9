#include "ops/attention.hpp"

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

// ---- self-attention core: one (image, head) pair at a time ------------------------------------
// q, k, v point at row 0 of the head's columns; rows are ld apart (3D in the packed projection).
// P (T x np) receives the attention weights, its rows padded to np = T rounded up to a multiple of 8
// (padded_tokens) with weight 0, so that every loop over keys runs in whole vectors: at 17 tokens an
// unpadded row is two vectors and a scalar remainder, and the remainder's exp costs as much as a
// vector's. out rows are ldo apart (D).

std::int64_t padded_tokens(std::int64_t n) { return (n + 7) / 8 * 8; }

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
    attention_head_forward<T, HD>(q, q + s.D, q + 2 * s.D, ld, int(s.T), int(s.hd), scale, s.causal, P + bh * s.T * np,
                                  out + b * s.T * s.D + h * s.hd, s.D, kt.data());
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
                                   g + b * s.T * s.D + h * s.hd, s.D, dq, dq + s.D, dq + 2 * s.D, ds.data(), vt.data());
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
static_assert(kLanes == 8, "the lane layout moves 8 x 8 float blocks (LaneVec)");

bool lane_path(const AttentionShape& s) { return s.T <= kLaneMaxTokens; }

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
      : q(std::size_t(n * hd * kLanes)),
        k(q.size()),
        v(q.size()),
        g(q.size()),
        o(q.size()),
        dk(q.size()),
        dv(q.size()),
        s(std::size_t(n * n * kLanes)) {}
};

// out[c*8 + l] (c < hd, one head's row in lane layout) = sum_{j < cnt} w[j*ws + l] X[j*xs + c*8 + l]: the
// row is built in blocks of CB dimensions held in registers across the whole sum over j (CB*8
// values: 8 vectors of floats or doubles' halves), so the loop stores nothing until a block is done.
template <typename T>
ARCAL_ALWAYS_INLINE void lane_weighted_rows(const T* w, std::int64_t ws, const T* X, std::int64_t xs, std::int64_t cnt,
                                            int hd, T* __restrict out) {
  constexpr int CB = 32 / int(sizeof(T));
  int c0 = 0;
  if constexpr (std::is_same_v<T, float>) {
    // In float (CB = 8) the eight accumulators are named vectors: as an array, GCC kept one of them on
    // the stack (a load and a store around its multiply-add in every step of j, whose store-to-load
    // latency then set the loop's pace: the hottest instructions of the fp32 forward and backward).
    // The same multiply-adds in the same order, so the same values.
    static_assert(CB == 8);
    for (; c0 + CB <= hd; c0 += CB) {
      LaneVec a0{}, a1{}, a2{}, a3{}, a4{}, a5{}, a6{}, a7{};
      for (std::int64_t j = 0; j < cnt; ++j) {
        LaneVec wj, x0, x1, x2, x3, x4, x5, x6, x7;
        lane_load8(w + j * ws, wj);
        const float* xj = X + j * xs + c0 * kLanes;
        lane_load8(xj, x0), lane_load8(xj + 8, x1), lane_load8(xj + 16, x2), lane_load8(xj + 24, x3);
        lane_load8(xj + 32, x4), lane_load8(xj + 40, x5), lane_load8(xj + 48, x6), lane_load8(xj + 56, x7);
        a0 += wj * x0, a1 += wj * x1, a2 += wj * x2, a3 += wj * x3;
        a4 += wj * x4, a5 += wj * x5, a6 += wj * x6, a7 += wj * x7;
      }
      float* o = out + c0 * kLanes;
      lane_store8(o, a0), lane_store8(o + 8, a1), lane_store8(o + 16, a2), lane_store8(o + 24, a3);
      lane_store8(o + 32, a4), lane_store8(o + 40, a5), lane_store8(o + 48, a6), lane_store8(o + 56, a7);
    }
  } else {
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
ARCAL_ALWAYS_INLINE void lane_forward(const S* qkv, const AttentionShape& s, std::int64_t begin, std::int64_t end, T* P,
                                      S* out) {
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
ARCAL_ALWAYS_INLINE void lane_forward_range(const S* qkv, const AttentionShape& s, std::int64_t b, std::int64_t e, T* P,
                                            S* out) {
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
ARCAL_FUSED_CLONES void attention_forward_f(const float* qkv, const AttentionShape& s, std::int64_t b, std::int64_t e,
                                            float* P, float* out) {
  if (lane_path(s)) return lane_forward_range(qkv, s, b, e, P, out);
  attention_forward_range(qkv, s, b, e, P, out);
}
ARCAL_FUSED_CLONES void attention_forward_d(const double* qkv, const AttentionShape& s, std::int64_t b, std::int64_t e,
                                            double* P, double* out) {
  if (lane_path(s)) return lane_forward_range(qkv, s, b, e, P, out);
  attention_forward_range(qkv, s, b, e, P, out);
}
ARCAL_FUSED_CLONES void attention_backward_f(const float* qkv, const AttentionShape& s, const float* P, const float* g,
                                             std::int64_t b, std::int64_t e, float* dqkv) {
  if (lane_path(s)) return lane_backward_range(qkv, s, P, g, b, e, dqkv);
  attention_backward_range(qkv, s, P, g, b, e, dqkv);
}
ARCAL_FUSED_CLONES void attention_backward_d(const double* qkv, const AttentionShape& s, const double* P,
                                             const double* g, std::int64_t b, std::int64_t e, double* dqkv) {
  if (lane_path(s)) return lane_backward_range(qkv, s, P, g, b, e, dqkv);
  attention_backward_range(qkv, s, P, g, b, e, dqkv);
}

void attention_forward(const float* x, const AttentionShape& s, std::int64_t b, std::int64_t e, float* P, float* out) {
  attention_forward_f(x, s, b, e, P, out);
}
void attention_forward(const double* x, const AttentionShape& s, std::int64_t b, std::int64_t e, double* P,
                       double* out) {
  attention_forward_d(x, s, b, e, P, out);
}
void attention_backward(const float* x, const AttentionShape& s, const float* P, const float* g, std::int64_t b,
                        std::int64_t e, float* dx) {
  attention_backward_f(x, s, P, g, b, e, dx);
}
void attention_backward(const double* x, const AttentionShape& s, const double* P, const double* g, std::int64_t b,
                        std::int64_t e, double* dx) {
  attention_backward_d(x, s, P, g, b, e, dx);
}

}  // namespace arcal::fused
