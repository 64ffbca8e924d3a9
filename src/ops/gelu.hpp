// The exact GELU, x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (torch.nn.functional.gelu's default), on
// float arrays, with its derivative Phi(x) + x phi(x) stored in the same pass for a backward. The
// hidden layers of the audit's MLP probes (audit/mlp_probe.cpp) run on it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace arcal {

/// y[i] = gelu(x[i]) and, when dy is not null, dy[i] = gelu'(x[i]), for i < n (x may alias y).
/// Vectorised, with Phi from ops/phi.hpp: relative error about 3e-7 against a double evaluation, the
/// model's fused GELU's float arithmetic.
void gelu_forward(const float* x, float* y, float* dy, std::size_t n);

}  // namespace arcal

// The model's fused GELU kernels (model/fused.cpp's GeluFunction wraps them): elements [b, e) of x in
// float, double or bf16 (uint16, widened to float and rounded back); the _derivative kernels also write
// gelu'(x) = Phi(x) + x phi(x) for the backward. bf16 goes by a table of all 65536 inputs
// (gelu_bf16_table: gelu in the low and gelu' in the high 16 bits), computed once by the float kernel.
namespace arcal::fused {

void gelu_f(const float* x, std::int64_t b, std::int64_t e, float* y);
void gelu_d(const double* x, std::int64_t b, std::int64_t e, double* y);
void gelu_derivative_f(const float* x, std::int64_t b, std::int64_t e, float* y, float* dydx);
void gelu_derivative_d(const double* x, std::int64_t b, std::int64_t e, double* y, double* dydx);
void gelu_derivative_bf16(const std::uint16_t* x, std::int64_t b, std::int64_t e, std::uint16_t* y,
                          std::uint16_t* dydx);
const std::uint32_t* gelu_bf16_table();
void gelu_lookup(const std::uint32_t* table, const std::uint16_t* x, std::int64_t begin, std::int64_t end,
                 std::uint16_t* y);
void gelu_derivative_lookup(const std::uint32_t* table, const std::uint16_t* x, std::int64_t begin, std::int64_t end,
                            std::uint16_t* y, std::uint16_t* dydx);
void bf16_product(const std::uint16_t* a, const std::uint16_t* b, std::int64_t begin, std::int64_t end,
                  std::uint16_t* out);

}  // namespace arcal::fused
