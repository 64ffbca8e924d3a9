// Tensor comparison for the model tests: the largest absolute difference relative to the largest
// entry of the reference, in float64.
#pragma once

#include <torch/torch.h>

#include <algorithm>

namespace arcal::test {

inline double max_rel(const torch::Tensor& a, const torch::Tensor& reference) {
  const auto diff = (a.to(torch::kDouble) - reference.to(torch::kDouble)).abs().max().item<double>();
  return diff / std::max(reference.to(torch::kDouble).abs().max().item<double>(), 1e-30);
}

}  // namespace arcal::test
