#include "ops/gelu.hpp"

#include <cstdint>

#include "ops/phi.hpp"

namespace arcal {

namespace {

#ifdef ARCAL_NO_TARGET_CLONES  // ThreadSanitizer builds: an instrumented ifunc resolver runs before TSan's runtime exists
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

ARCAL_GELU_CLONES void gelu_and_derivative(const float* x, float* y, float* dy,
                                           std::size_t n) {
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
