// Helpers for the model tests: tensor comparison (the largest absolute difference relative to the
// largest entry of the reference, in float64) and a guard for the fused-operator switch.
#pragma once

#include <torch/torch.h>

#include <algorithm>

#include "model/fused.hpp"

namespace arcal::test {

inline double max_rel(const torch::Tensor& a, const torch::Tensor& reference) {
  const auto diff = (a.to(torch::kDouble) - reference.to(torch::kDouble)).abs().max().item<double>();
  return diff / std::max(reference.to(torch::kDouble).abs().max().item<double>(), 1e-30);
}

/// Restores the process-wide fused-operator switch (model/fused.hpp) when the scope ends.
struct FusedGuard {
  bool before = fused_operators_enabled();
  ~FusedGuard() { set_fused_operators(before); }
};

}  // namespace arcal::test
