// The standard normal CDF Phi(x) in float, branch-free so that loops over it vectorise, for the exact
// GELU x Phi(x) of the model's fused operators (model/fused.cpp) and of the audit's probes
// (ops/gelu.cpp); the double overloads use std::erfc. With z = |x| / sqrt 2 and t = 1 / (1 + z / 2),
// erfc(z) = t Q(t) e^{-z^2}: Q(t) = erfcx(z) / t is smooth on t in (0, 1] (Q(1) = 1,
// Q(0) = 1 / (2 sqrt pi)) and Q is its degree-10 Chebyshev least-squares fit in relative error (3.7e-8
// in double, 2.3e-7 evaluated in float; scripts/fit_erfcx.py fits it against scipy.special.erfcx). The
// one exponential e^{-x^2/2} (core/fast_exp.hpp) serves both Phi and phi, so GELU's derivative costs two
// products more than its value. Relative accuracy holds in the tails, where 1 + erf(x / sqrt 2) would
// cancel.
#pragma once

#include <cmath>

#include "core/fast_exp.hpp"

namespace arcal {

// 0.5 t Q(t), the polynomial in Estrin's form (a shorter dependency chain than Horner's).
ARCAL_ALWAYS_INLINE float half_t_q(float t) {
  const float t2 = t * t, t4 = t2 * t2, t8 = t4 * t4;
  const float p0 = 0.28209480f + 0.28209306f * t, p1 = 0.24690277f + 0.17510702f * t;
  const float p2 = 0.09474893f - 0.06389186f * t, p3 = 0.14271553f - 0.46980881f * t;
  const float p4 = 0.50639609f - 0.24077946f * t;
  return 0.5f * t * ((p0 + t2 * p1) + t4 * (p2 + t2 * p3) + t8 * (p4 + t2 * 0.04442195f));
}
// Phi(x) and e^{-x^2/2} (phi(x) without its constant).
ARCAL_ALWAYS_INLINE float phi_cdf(float x, float& gauss) {
  const float t = 1.0f / (1.0f + 0.35355339059327376f * std::fabs(x));
  gauss = exp_nonpos(-0.5f * x * x);
  const float tail = half_t_q(t) * gauss;  // Phi(-|x|)
  return x >= 0.0f ? 1.0f - tail : tail;
}
ARCAL_ALWAYS_INLINE double phi_cdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }
ARCAL_ALWAYS_INLINE double phi_cdf(double x, double& gauss) {
  gauss = std::exp(-0.5 * x * x);
  return phi_cdf(x);
}
// Phi alone: in float the exponential is Phi's own, in double std::erfc needs none.
ARCAL_ALWAYS_INLINE float phi_cdf(float x) {
  float gauss;
  return phi_cdf(x, gauss);
}

}  // namespace arcal
