// LayerNorm over the last axis on plain arrays (model/fused.cpp's LayerNormFunction wraps it): rows of
// d values, y = (x - mean) rstd w + b with the biased variance (two passes), in float or double, the
// output or the backward's dy optionally bf16 (uint16). Backward: dx per row, and dw, db summed over
// blocks of kNormBlock rows added in block order (the same on any thread count). Rows [r0, r1).
#pragma once

#include <cstdint>

namespace arcal::fused {

/// Rows per block of the backward's dw and db partial sums.
inline constexpr std::int64_t kNormBlock = 64;

void layer_norm_kernel(const float* x, const float* w, const float* b, std::int64_t r0, std::int64_t r1, std::int64_t d,
                       float eps, float* y, float* mean, float* rstd);
void layer_norm_kernel(const double* x, const double* w, const double* b, std::int64_t r0, std::int64_t r1,
                       std::int64_t d, double eps, double* y, double* mean, double* rstd);
void layer_norm_backward_kernel(const float* x, const float* w, const float* dy, const float* mean, const float* rstd,
                                std::int64_t r0, std::int64_t r1, std::int64_t d, float* dx, float* dw_part,
                                float* db_part);
void layer_norm_kernel(const float* x, const float* w, const float* b, std::int64_t r0, std::int64_t r1, std::int64_t d,
                       float eps, std::uint16_t* y, float* mean, float* rstd);
void layer_norm_backward_kernel(const float* x, const float* w, const std::uint16_t* dy, const float* mean,
                                const float* rstd, std::int64_t r0, std::int64_t r1, std::int64_t d, float* dx,
                                float* dw_part, float* db_part);
void layer_norm_backward_kernel(const double* x, const double* w, const double* dy, const double* mean,
                                const double* rstd, std::int64_t r0, std::int64_t r1, std::int64_t d, double* dx,
                                double* dw_part, double* db_part);
std::int64_t norm_block_grain(std::int64_t d);

}  // namespace arcal::fused
