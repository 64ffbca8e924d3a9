// One AdamW step over every parameter in one pass per tensor, for the trainer (train/trainer.cpp).
// torch::optim::AdamW::step spends eight LibTorch calls per parameter (decay, two moments, sqrt,
// division, add, addcdiv) on AR-ViT-tiny's 82 small tensors, about 2.5 ms of a ~100 ms step; this
// computes the same update in one vectorised loop per parameter and keeps its state in the
// optimizer's own state objects, so checkpoints (torch::save of the optimizer) are unchanged and a
// run may resume with either.
#pragma once

#include <torch/torch.h>

namespace arcal {

/// Applies one step of `opt` exactly as torch::optim::AdamW::step (LibTorch 1.13: decoupled weight
/// decay p *= 1 - lr wd; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
/// p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)), float rounding aside.
/// Parameters without a gradient are skipped, as there. Falls back to opt.step() for what the loop
/// does not cover: amsgrad, sparse gradients, non-CPU, non-contiguous or non-float/double tensors.
void adamw_step(torch::optim::AdamW& opt);

/// Before a step's backward: every parameter's gradient undefined (what LibTorch 2's
/// zero_grad(set_to_none) does) instead of zeroed, so the backward hands each parameter its gradient
/// (AccumulateGrad keeps the tensor, in the parameter's layout) instead of adding it to zeros: on
/// AR-ViT-tiny 82 detach_, zero_ and add_ calls fewer per step. After the backward,
/// restore_unused_gradients gives what zero_grad() would have left.
void clear_gradients(torch::optim::Optimizer& opt);

/// After the backward that followed clear_gradients: a parameter that has AdamW state (it had a
/// gradient at an earlier step) but got none now gets zeros, as zero_grad() would have left it, so
/// the step still decays it and moves its moments; one that never had a gradient stays without one
/// (skipped, as by zero_grad() and step()). With zeroed gradients the backward adds g to +0, which is
/// g except that -0 becomes +0; no update reads the sign of a zero gradient, so the steps agree bit for
/// bit (trainings' model.pt byte-identical).
void restore_unused_gradients(torch::optim::AdamW& opt);

/// The same update for one tensor outside an optimizer (the audit's stacked MLP probes): p, its
/// gradient g and moments m, v (dense contiguous CPU tensors of one shape, float or double) updated in
/// place for step t >= 1 (the bias corrections' exponent). p is multiplied by 1 - lr wd even when wd
/// is 0 (a product by exactly 1). Throws std::invalid_argument for tensors the loop does not cover.
void adamw_update(const torch::Tensor& p, const torch::Tensor& g, const torch::Tensor& m, const torch::Tensor& v,
                  double lr, double weight_decay, double beta1, double beta2, double eps, std::int64_t t);

}  // namespace arcal
