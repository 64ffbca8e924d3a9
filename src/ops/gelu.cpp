#include "ops/gelu.hpp"

#include <cstdint>

#include <type_traits>
#include <vector>

#include "ops/fused_lanes.hpp"
#include "ops/phi.hpp"

namespace arcal {

namespace {

#ifdef ARCAL_NO_TARGET_CLONES  // ThreadSanitizer builds: an instrumented ifunc resolver runs before TSan's runtime
                               // exists
#define ARCAL_GELU_CLONES
#else
#define ARCAL_GELU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

ARCAL_GELU_CLONES void gelu_values(const float* x, float* y, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v * phi_cdf(v);
  }
}

ARCAL_GELU_CLONES void gelu_and_derivative(const float* x, float* y, float* dy, std::size_t n) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i];
    float gauss;
    const float c = phi_cdf(v, gauss);
    y[i] = v * c;
    dy[i] = c + v * 0.39894228040143267794f * gauss;
  }
}

}  // namespace

void gelu_forward(const float* x, float* y, float* dy, std::size_t n) {
  // In place (x == y) is allowed: each iteration reads x[i] and writes y[i] alone (omp simd: no
  // dependence between iterations), so the pointers carry no __restrict.
  if (dy)
    gelu_and_derivative(x, y, dy, n);
  else
    gelu_values(x, y, n);
}

}  // namespace arcal

namespace arcal::fused {

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
// out = a b rounded to bf16, the product taken in float.
ARCAL_FUSED_CLONES void bf16_product(const std::uint16_t* a, const std::uint16_t* b, std::int64_t begin,
                                     std::int64_t end, std::uint16_t* out) {
#pragma omp simd
  for (std::int64_t i = begin; i < end; ++i) store(out[i], widen(a[i]) * widen(b[i]));
}

}  // namespace arcal::fused
