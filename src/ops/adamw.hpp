// The AdamW update on plain arrays: one vectorised pass per parameter tensor, with the arithmetic of
// torch::optim::AdamW (decoupled decay first, then the bias-corrected Adam step; scalars computed in
// double and rounded to the element type). Used by the trainer's LibTorch optimizer (train/adamw.hpp)
// and by the audit's own MLP probe trainer (audit/mlp_probe.cpp), which has no LibTorch.
#pragma once

#include <cstdint>

namespace arcal {

/// The step's scalars, as LibTorch passes them to its float kernels.
template <typename T>
struct AdamwScalars {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, sqrt_bc2, eps, neg_step;
};

/// Scalars of step t >= 1 (the bias corrections' exponent) for learning rate lr and decay wd:
/// decay = 1 - lr wd (1 when wd = 0), sqrt_bc2 = sqrt(1 - beta2^t), neg_step = -lr / (1 - beta1^t).
AdamwScalars<float> adamw_scalars_float(double lr, double weight_decay, double beta1, double beta2, double eps,
                                        std::int64_t t);
AdamwScalars<double> adamw_scalars_double(double lr, double weight_decay, double beta1, double beta2, double eps,
                                          std::int64_t t);

/// Elements [b, e) of parameter p, gradient g, first and second moments m, v (same length), updated in
/// place: p *= decay (rounded, as LibTorch's p.mul_ is); m = beta1 m + (1 - beta1) g;
/// v = beta2 v + (1 - beta2) g^2; p += neg_step * m / (sqrt(v) / sqrt_bc2 + eps).
void adamw_kernel(float* p, const float* g, float* m, float* v, std::int64_t b, std::int64_t e,
                  const AdamwScalars<float>& s);
void adamw_kernel(double* p, const double* g, double* m, double* v, std::int64_t b, std::int64_t e,
                  const AdamwScalars<double>& s);

}  // namespace arcal
