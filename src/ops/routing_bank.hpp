// The routing point of Block/Full AttnRes on plain arrays (method.md §1; model/fused.cpp's RoutingBank
// wraps it for autograd): rows n of N = B*T, width d, S sources (float or bf16 values, float or double
// arithmetic). Forward: logit_s = r_s (v_s . u), r_s = (mean_c v_s[c]^2 + eps)^(-1/2), alpha =
// softmax_s(logit), h = sum_s alpha_s v_s. Backward: du (summed over rows in blocks of kRouteBlock, in
// block order) and per source the row coefficients (cu, cv) from which source_grad builds dv_s in one
// pass over its points. Rows go in blocks of kRowBlock; `routing_grain` rows per parallel task.
#pragma once

#include <cstdint>

namespace arcal::fused {

/// Rows per block of every routing kernel (each pass streams one tensor's contiguous block).
inline constexpr std::int64_t kRowBlock = 32;
/// Rows of one block of the backward's du reduction: fixed, so that du's summation order (blocks in
/// order) and hence its value do not depend on the thread count.
inline constexpr std::int64_t kRouteBlock = 128;

std::int64_t routing_grain(int S, std::int64_t d);
void route_point(const float* u, const void* const* v, const std::uint8_t* half, const float* const* kn, int S,
                 std::int64_t N, std::int64_t d, double eps, std::int64_t b, std::int64_t e, float* o, float* a,
                 float* l, float* r);
void route_point(const double* u, const void* const* v, const std::uint8_t*, const double* const* kn, int S,
                 std::int64_t N, std::int64_t d, double eps, std::int64_t b, std::int64_t e, double* o, double* a,
                 double* l, double* r);
void route_point_backward(const void* const* v, const std::uint8_t* half, const float* a, const float* l,
                          const float* r, const float* g, int S, std::int64_t N, std::int64_t d, std::int64_t b,
                          std::int64_t e, float* cu, float* cv, float* du, float* da);
void route_point_backward(const void* const* v, const std::uint8_t*, const double* a, const double* l, const double* r,
                          const double* g, int S, std::int64_t N, std::int64_t d, std::int64_t b, std::int64_t e,
                          double* cu, double* cv, double* du, double* da);
void source_grad(const float* v, int K, const float* const* a, const float* const* cu, const float* const* cv,
                 const float* const* g, const float* const* u, std::int64_t d, std::int64_t b, std::int64_t e,
                 float* out);
void source_grad(const std::uint16_t* v, int K, const float* const* a, const float* const* cu, const float* const* cv,
                 const float* const* g, const float* const* u, std::int64_t d, std::int64_t b, std::int64_t e,
                 float* out);
void source_grad(const double* v, int K, const double* const* a, const double* const* cu, const double* const* cv,
                 const double* const* g, const double* const* u, std::int64_t d, std::int64_t b, std::int64_t e,
                 double* out);

}  // namespace arcal::fused
