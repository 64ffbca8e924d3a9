#include "ops/gelu.hpp"

#include <cmath>

namespace arcal {

void gelu_forward(const float* x, float* y, float* dy, std::size_t n) {
  constexpr float kInvSqrt2 = 0.70710678118654752440f, kInvSqrt2Pi = 0.39894228040143267794f;
  if (dy) {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float cdf = 0.5f * (1.0f + std::erf(v * kInvSqrt2));
      dy[i] = cdf + v * kInvSqrt2Pi * std::exp(-0.5f * v * v);
      y[i] = v * cdf;
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = x[i];
      y[i] = v * 0.5f * (1.0f + std::erf(v * kInvSqrt2));
    }
  }
}

}  // namespace arcal
