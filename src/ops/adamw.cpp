#include "ops/adamw.hpp"

#include <cmath>

namespace arcal {

namespace {

#ifdef ARCAL_NO_TARGET_CLONES  // ThreadSanitizer builds: an instrumented ifunc resolver runs before TSan's runtime
                               // exists
#define ARCAL_ADAMW_CLONES
#else
#define ARCAL_ADAMW_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

template <typename T>
AdamwScalars<T> scalars(double lr, double weight_decay, double beta1, double beta2, double eps, std::int64_t t) {
  const double bc1 = 1 - std::pow(beta1, double(t)), bc2 = 1 - std::pow(beta2, double(t));
  return {T(weight_decay != 0 ? 1 - lr * weight_decay : 1.0),
          T(beta1),
          T(1 - beta1),
          T(beta2),
          T(1 - beta2),
          T(std::sqrt(bc2)),
          T(eps),
          T(-(lr / bc1))};
}

template <typename T>
inline void adamw_rows(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, std::int64_t b,
                       std::int64_t e, const AdamwScalars<T>& s) {
  const T decay = s.decay, beta1 = s.beta1, c1 = s.one_minus_beta1, beta2 = s.beta2, c2 = s.one_minus_beta2;
  const T sqrt_bc2 = s.sqrt_bc2, eps = s.eps, neg_step = s.neg_step;  // in registers, not re-read per element
  // The decay first, in a pass of its own: the product is rounded before the update is added, as
  // LibTorch's p.mul_(1 - lr wd) rounds it (in one loop the vectorised add would fuse with it).
#pragma omp simd
  for (std::int64_t i = b; i < e; ++i) p[i] *= decay;
#pragma omp simd
  for (std::int64_t i = b; i < e; ++i) {
    const T gi = g[i];
    const T mi = m[i] * beta1 + c1 * gi;
    const T vi = v[i] * beta2 + c2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] + neg_step * mi / (std::sqrt(vi) / sqrt_bc2 + eps);
  }
}

}  // namespace

AdamwScalars<float> adamw_scalars_float(double lr, double weight_decay, double beta1, double beta2, double eps,
                                        std::int64_t t) {
  return scalars<float>(lr, weight_decay, beta1, beta2, eps, t);
}
AdamwScalars<double> adamw_scalars_double(double lr, double weight_decay, double beta1, double beta2, double eps,
                                          std::int64_t t) {
  return scalars<double>(lr, weight_decay, beta1, beta2, eps, t);
}

// One clone set per dtype (overloads: target_clones takes no templates).
ARCAL_ADAMW_CLONES void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t b, std::int64_t e,
                                     const AdamwScalars<float>& s) {
  adamw_rows(p, g, m, v, b, e, s);
}
ARCAL_ADAMW_CLONES void adamw_kernel(double* p, const double* g, double* m, double* v, std::int64_t b, std::int64_t e,
                                     const AdamwScalars<double>& s) {
  adamw_rows(p, g, m, v, b, e, s);
}

}  // namespace arcal
