// Soft-binned ECE (Karandikar et al. 2021), the differentiable calibration term of the training
// loss (method.md §2): anchors (j - 1/2)/M, memberships softmax_j(-(c - anchor_j)^2 / T), T > 0,
// L2 form sqrt(sum_j (S_j / sum S) (cbar_j - abar_j)^2). Correctness is not differentiated.
#pragma once

#include <torch/torch.h>

namespace arcal {

/// logits (B,K), labels (B) int64 -> scalar SB-ECE. Throws InputError when temperature <= 0 or bins < 1.
/// The square root is taken of max(x, 1e-12) so its gradient stays finite at perfect calibration.
torch::Tensor soft_binned_ece(const torch::Tensor& logits, const torch::Tensor& labels, int bins = 15,
                              double temperature = 0.01);

}  // namespace arcal
