#include "model/fused.hpp"

#include <ATen/Parallel.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/check.hpp"
#include "core/fast_exp.hpp"

// Each kernel is a plain loop nest the compiler vectorises over the innermost contiguous axis (the
// head dimension, the width); target clones give every ISA level its own copy.
#define ARCAL_FUSED_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

namespace arcal {

namespace {

std::atomic<int> g_fused{-1};  // -1: not read from the environment yet

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

template <typename T>
ARCAL_ALWAYS_INLINE T exp_shifted(T x) {  // e^x for x <= 0
  if constexpr (std::is_same_v<T, float>)
    return exp_nonpos(x);
  else
    return std::exp(x);
}

// ---- routing sum: rows n of N = B*T, width d, S sources --------------------------------------

template <typename T>
ARCAL_ALWAYS_INLINE void routing_sum_rows(const T* alpha, const T* const* values, int S, std::int64_t N,
                                          std::int64_t d, std::int64_t begin, std::int64_t end, T* out) {
  for (std::int64_t n = begin; n < end; ++n) {
    T* __restrict o = out + n * d;
    const T a0 = alpha[n];
    const T* __restrict v0 = values[0] + n * d;
    #pragma omp simd
    for (std::int64_t c = 0; c < d; ++c) o[c] = a0 * v0[c];
    for (int s = 1; s < S; ++s) {
      const T a = alpha[s * N + n];
      const T* __restrict v = values[s] + n * d;
      #pragma omp simd
      for (std::int64_t c = 0; c < d; ++c) o[c] += a * v[c];
    }
  }
}

template <typename T>
ARCAL_ALWAYS_INLINE void routing_sum_backward_rows(const T* alpha, const T* const* values, const T* grad, int S,
                                                   std::int64_t N, std::int64_t d, std::int64_t begin,
                                                   std::int64_t end, T* dalpha, T* const* dvalues) {
  for (std::int64_t n = begin; n < end; ++n) {
    const T* __restrict g = grad + n * d;
    for (int s = 0; s < S; ++s) {
      const T a = alpha[s * N + n];
      const T* __restrict v = values[s] + n * d;
      T* __restrict dv = dvalues[s] + n * d;
      #pragma omp simd
      for (std::int64_t c = 0; c < d; ++c) dv[c] = a * g[c];
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (std::int64_t c = 0; c < d; ++c) dot += g[c] * v[c];
      dalpha[s * N + n] = dot;
    }
  }
}

ARCAL_FUSED_CLONES void routing_sum_f(const float* alpha, const float* const* values, int S, std::int64_t N,
                                      std::int64_t d, std::int64_t begin, std::int64_t end, float* out) {
  routing_sum_rows(alpha, values, S, N, d, begin, end, out);
}
ARCAL_FUSED_CLONES void routing_sum_d(const double* alpha, const double* const* values, int S, std::int64_t N,
                                      std::int64_t d, std::int64_t begin, std::int64_t end, double* out) {
  routing_sum_rows(alpha, values, S, N, d, begin, end, out);
}
ARCAL_FUSED_CLONES void routing_sum_backward_f(const float* alpha, const float* const* values, const float* grad,
                                               int S, std::int64_t N, std::int64_t d, std::int64_t begin,
                                               std::int64_t end, float* dalpha, float* const* dvalues) {
  routing_sum_backward_rows(alpha, values, grad, S, N, d, begin, end, dalpha, dvalues);
}
ARCAL_FUSED_CLONES void routing_sum_backward_d(const double* alpha, const double* const* values,
                                               const double* grad, int S, std::int64_t N, std::int64_t d,
                                               std::int64_t begin, std::int64_t end, double* dalpha,
                                               double* const* dvalues) {
  routing_sum_backward_rows(alpha, values, grad, S, N, d, begin, end, dalpha, dvalues);
}

inline void routing_sum(const float* a, const float* const* v, int S, std::int64_t N, std::int64_t d,
                        std::int64_t b, std::int64_t e, float* o) {
  routing_sum_f(a, v, S, N, d, b, e, o);
}
inline void routing_sum(const double* a, const double* const* v, int S, std::int64_t N, std::int64_t d,
                        std::int64_t b, std::int64_t e, double* o) {
  routing_sum_d(a, v, S, N, d, b, e, o);
}
inline void routing_sum_backward(const float* a, const float* const* v, const float* g, int S, std::int64_t N,
                                 std::int64_t d, std::int64_t b, std::int64_t e, float* da, float* const* dv) {
  routing_sum_backward_f(a, v, g, S, N, d, b, e, da, dv);
}
inline void routing_sum_backward(const double* a, const double* const* v, const double* g, int S,
                                 std::int64_t N, std::int64_t d, std::int64_t b, std::int64_t e, double* da,
                                 double* const* dv) {
  routing_sum_backward_d(a, v, g, S, N, d, b, e, da, dv);
}

// Rows per parallel task: about 16K multiply-adds each.
std::int64_t routing_grain(int S, std::int64_t d) {
  return std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, S * d));
}

void routing_sum_kernel(const torch::Tensor& alpha, const std::vector<torch::Tensor>& values, torch::Tensor& out) {
  const int S = static_cast<int>(values.size());
  const std::int64_t N = alpha.size(1) * alpha.size(2), d = out.size(-1);
  const std::int64_t grain = routing_grain(S, d);
  AT_DISPATCH_FLOATING_TYPES(alpha.scalar_type(), "routing_sum", [&] {
    std::vector<const scalar_t*> v(S);
    for (int s = 0; s < S; ++s) v[s] = values[s].data_ptr<scalar_t>();
    const scalar_t* a = alpha.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    at::parallel_for(0, N, grain, [&](std::int64_t b, std::int64_t e) {
      routing_sum(a, v.data(), S, N, d, b, e, o);
    });
  });
}

struct RoutingSumFunction : public torch::autograd::Function<RoutingSumFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& alpha, torch::TensorList values) {
    std::vector<torch::Tensor> v(values.begin(), values.end());
    for (auto& t : v) t = t.contiguous();
    auto a = alpha.contiguous();
    auto out = torch::empty(v[0].sizes(), v[0].options());
    routing_sum_kernel(a, v, out);
    variable_list saved{a};
    saved.insert(saved.end(), v.begin(), v.end());
    ctx->save_for_backward(saved);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    const auto& alpha = saved[0];
    const std::vector<torch::Tensor> values(saved.begin() + 1, saved.end());
    const int S = static_cast<int>(values.size());
    auto grad = grad_outputs[0].to(alpha.scalar_type()).contiguous();
    auto dalpha = torch::empty_like(alpha);
    std::vector<torch::Tensor> dvalues(S);
    for (int s = 0; s < S; ++s) dvalues[s] = torch::empty_like(values[s]);
    const std::int64_t N = alpha.size(1) * alpha.size(2), d = grad.size(-1);
    const std::int64_t grain = routing_grain(S, d);
    AT_DISPATCH_FLOATING_TYPES(alpha.scalar_type(), "routing_sum_backward", [&] {
      std::vector<const scalar_t*> v(S);
      std::vector<scalar_t*> dv(S);
      for (int s = 0; s < S; ++s) {
        v[s] = values[s].data_ptr<scalar_t>();
        dv[s] = dvalues[s].data_ptr<scalar_t>();
      }
      const scalar_t* a = alpha.data_ptr<scalar_t>();
      const scalar_t* g = grad.data_ptr<scalar_t>();
      scalar_t* da = dalpha.data_ptr<scalar_t>();
      at::parallel_for(0, N, grain, [&](std::int64_t b, std::int64_t e) {
        routing_sum_backward(a, v.data(), g, S, N, d, b, e, da, dv.data());
      });
    });
    variable_list grads{dalpha};
    grads.insert(grads.end(), dvalues.begin(), dvalues.end());
    return grads;
  }
};

// ---- self-attention core: one (image, head) pair at a time ------------------------------------
// q, k, v point at row 0 of the head's columns; rows are ld apart (3D in the packed projection).
// P (T x T) receives the attention weights; out rows are ldo apart (D).

template <typename T>
ARCAL_ALWAYS_INLINE void transpose_head(const T* x, std::int64_t ld, int n, int hd, T* __restrict xt) {
  for (int j = 0; j < n; ++j)
    for (int c = 0; c < hd; ++c) xt[c * n + j] = x[j * ld + c];
}

// out (n x n) = a b^T for two heads' rows (n x hd, rows lda / ldb apart): out[i][j] = a_i . b_j, built
// column by column of the head dimension so that row i is updated again only after the other n-1
// rows. bt (hd x n) is scratch for b held transposed, so every update runs over contiguous j.
template <typename T, int HD>
ARCAL_ALWAYS_INLINE void head_products(const T* a, std::int64_t lda, const T* b, std::int64_t ldb, int n,
                                       int hd_runtime, T* __restrict out, T* __restrict bt) {
  const int hd = HD > 0 ? HD : hd_runtime;
  transpose_head(b, ldb, n, hd, bt);
  const std::int64_t nn = std::int64_t(n) * n;
#pragma omp simd
  for (std::int64_t e = 0; e < nn; ++e) out[e] = 0;
  for (int c = 0; c < hd; ++c) {
    const T* __restrict bc = bt + c * n;
    for (int i = 0; i < n; ++i) {
      const T aic = a[i * lda + c];
      T* __restrict o = out + std::int64_t(i) * n;
#pragma omp simd
      for (int j = 0; j < n; ++j) o[j] += aic * bc[j];
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
  head_products<T, HD>(q, ld, k, ld, n, hd, P, Kt);  // raw scores q_i . k_j
  for (int i = 0; i < n; ++i) {
    T* __restrict p = P + std::int64_t(i) * n;
    T mx = -std::numeric_limits<T>::infinity();
    const int last = causal ? i : n - 1;  // keys after `last` get weight exactly 0
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < n; ++j) {
      p[j] = j > last ? -std::numeric_limits<T>::infinity() : p[j] * scale;
      mx = p[j] > mx ? p[j] : mx;
    }
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; ++j) {
      p[j] = exp_shifted<T>(p[j] - mx);
      sum += p[j];
    }
    const T inv = T(1) / sum;
#pragma omp simd
    for (int j = 0; j < n; ++j) p[j] *= inv;
    T* __restrict oi = out + i * ldo;
#pragma omp simd
    for (int c = 0; c < hd; ++c) oi[c] = 0;
  }
  for (int j = 0; j < n; ++j) {
    const T* __restrict vj = v + j * ld;
    for (int i = 0; i < n; ++i) {
      const T pij = P[std::int64_t(i) * n + j];
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
  head_products<T, HD>(g, ldo, v, ld, n, hd, dS, Vt);  // dP_ij = g_i . v_j
  for (int i = 0; i < n; ++i) {  // dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij') / sqrt(hd)
    const T* __restrict p = P + std::int64_t(i) * n;
    T* __restrict d = dS + std::int64_t(i) * n;
    T r = 0;
#pragma omp simd reduction(+ : r)
    for (int j = 0; j < n; ++j) r += p[j] * d[j];
#pragma omp simd
    for (int j = 0; j < n; ++j) d[j] = p[j] * (d[j] - r) * scale;
  }
  for (int i = 0; i < n; ++i) {  // dk_j += dS_ij q_i, dv_j += P_ij g_i
    const T* __restrict qi = q + i * ld;
    const T* __restrict gi = g + i * ldo;
    for (int j = 0; j < n; ++j) {
      const T sij = dS[std::int64_t(i) * n + j], pij = P[std::int64_t(i) * n + j];
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
      const T sij = dS[std::int64_t(i) * n + j];
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
  std::vector<T> kt(static_cast<std::size_t>(s.T * s.hd));
  for (std::int64_t bh = begin; bh < end; ++bh) {
    const std::int64_t b = bh / s.H, h = bh % s.H;
    const T* q = qkv + b * s.T * ld + h * s.hd;
    attention_head_forward<T, HD>(q, q + s.D, q + 2 * s.D, ld, int(s.T), int(s.hd), scale, s.causal,
                                  P + bh * s.T * s.T, out + b * s.T * s.D + h * s.hd, s.D, kt.data());
  }
}

template <typename T, int HD>
ARCAL_ALWAYS_INLINE void attention_backward_heads(const T* qkv, const AttentionShape& s, const T* P, const T* g,
                                                  std::int64_t begin, std::int64_t end, T* dqkv) {
  const std::int64_t ld = 3 * s.D;
  const T scale = T(1) / std::sqrt(T(s.hd));
  std::vector<T> ds(static_cast<std::size_t>(s.T * s.T)), vt(static_cast<std::size_t>(s.T * s.hd));
  for (std::int64_t bh = begin; bh < end; ++bh) {
    const std::int64_t b = bh / s.H, h = bh % s.H;
    const std::int64_t off = b * s.T * ld + h * s.hd;
    const T* q = qkv + off;
    T* dq = dqkv + off;
    for (std::int64_t t = 0; t < s.T; ++t)  // this head's gradient columns, zeroed while in cache
      for (int part = 0; part < 3; ++part) std::memset(dq + t * ld + part * s.D, 0, sizeof(T) * s.hd);
    attention_head_backward<T, HD>(q, q + s.D, q + 2 * s.D, ld, int(s.T), int(s.hd), scale, P + bh * s.T * s.T,
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

ARCAL_FUSED_CLONES void attention_forward_f(const float* qkv, const AttentionShape& s, std::int64_t b,
                                            std::int64_t e, float* P, float* out) {
  attention_forward_range(qkv, s, b, e, P, out);
}
ARCAL_FUSED_CLONES void attention_forward_d(const double* qkv, const AttentionShape& s, std::int64_t b,
                                            std::int64_t e, double* P, double* out) {
  attention_forward_range(qkv, s, b, e, P, out);
}
ARCAL_FUSED_CLONES void attention_backward_f(const float* qkv, const AttentionShape& s, const float* P,
                                             const float* g, std::int64_t b, std::int64_t e, float* dqkv) {
  attention_backward_range(qkv, s, P, g, b, e, dqkv);
}
ARCAL_FUSED_CLONES void attention_backward_d(const double* qkv, const AttentionShape& s, const double* P,
                                             const double* g, std::int64_t b, std::int64_t e, double* dqkv) {
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
    auto P = torch::empty({s.B, s.H, s.T, s.T}, qkv.options());
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "fused_self_attention", [&] {
      const scalar_t* x = qkv.data_ptr<scalar_t>();
      scalar_t* p = P.data_ptr<scalar_t>();
      scalar_t* o = out.data_ptr<scalar_t>();
      at::parallel_for(0, s.B * s.H, 8, [&](std::int64_t b, std::int64_t e) {
        attention_forward(x, s, b, e, p, o);
      });
    });
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
    auto dqkv = torch::empty_like(qkv);  // every entry is written: each head zeroes its own columns
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "fused_self_attention_backward", [&] {
      const scalar_t* x = qkv.data_ptr<scalar_t>();
      const scalar_t* p = P.data_ptr<scalar_t>();
      const scalar_t* gp = g.data_ptr<scalar_t>();
      scalar_t* dx = dqkv.data_ptr<scalar_t>();
      at::parallel_for(0, s.B * s.H, 8, [&](std::int64_t b, std::int64_t e) {
        attention_backward(x, s, p, gp, b, e, dx);
      });
    });
    return {dqkv, torch::Tensor(), torch::Tensor()};
  }
};

bool floating(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble;
}

}  // namespace

bool fused_operators_enabled() {
  int v = g_fused.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("ARCAL_FUSED");
    v = (env && std::strcmp(env, "0") == 0) ? 0 : 1;
    g_fused.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void set_fused_operators(bool enabled) { g_fused.store(enabled ? 1 : 0, std::memory_order_relaxed); }

torch::Tensor routing_sum(const torch::Tensor& alpha, const std::vector<torch::Tensor>& values) {
  const char* fn = "routing_sum";
  if (values.empty()) throw_input(fn, "no sources");
  if (alpha.dim() != 3 || alpha.size(0) != static_cast<std::int64_t>(values.size()))
    throw_input(fn, "alpha must be (S,B,T) with S = the number of sources (" + std::to_string(values.size()) + ")");
  if (!floating(alpha)) throw_input(fn, "alpha must be float or double");
  if (!alpha.device().is_cpu()) throw_input(fn, "CPU tensors only (the models use LibTorch's composite on other devices)");
  for (std::size_t s = 0; s < values.size(); ++s) {
    const auto& v = values[s];
    if (v.dim() != 3 || v.size(0) != alpha.size(1) || v.size(1) != alpha.size(2) || v.sizes() != values[0].sizes())
      throw_input(fn, "source " + std::to_string(s) + " must be (B,T,d) matching alpha (S,B,T) and source 0");
    if (v.scalar_type() != alpha.scalar_type() || v.device() != alpha.device())
      throw_input(fn, "source " + std::to_string(s) + " must have alpha's dtype and device");
  }
  return RoutingSumFunction::apply(alpha, torch::TensorList(values));
}

torch::Tensor fused_self_attention(const torch::Tensor& qkv, int heads, bool causal) {
  const char* fn = "fused_self_attention";
  if (qkv.dim() != 3 || qkv.size(2) % 3 != 0) throw_input(fn, "qkv must be (B,T,3D)");
  if (heads < 1 || (qkv.size(2) / 3) % heads != 0) throw_input(fn, "D must be a multiple of the number of heads");
  if (!floating(qkv)) throw_input(fn, "qkv must be float or double");
  if (!qkv.device().is_cpu()) throw_input(fn, "CPU tensors only (the models use LibTorch's composite on other devices)");
  return SelfAttentionFunction::apply(qkv, static_cast<std::int64_t>(heads), causal);
}

}  // namespace arcal
