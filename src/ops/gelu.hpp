// The exact GELU, x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 (torch.nn.functional.gelu's default), on
// float arrays, with its derivative Phi(x) + x phi(x) stored in the same pass for a backward. The
// hidden layers of the audit's MLP probes (audit/mlp_probe.cpp) run on it.
#pragma once

#include <cstddef>

namespace arcal {

/// y[i] = gelu(x[i]) and, when dy is not null, dy[i] = gelu'(x[i]), for i < n (x may alias y).
/// Vectorised, with Phi from ops/phi.hpp: relative error about 3e-7 against a double evaluation, the
/// model's fused GELU's float arithmetic.
void gelu_forward(const float* x, float* y, float* dy, std::size_t n);

}  // namespace arcal
