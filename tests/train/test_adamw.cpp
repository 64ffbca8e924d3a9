// train/adamw.hpp's one-pass AdamW step against torch::optim::AdamW::step (the reference it
// replaces): parameters and both moments after ten steps with a changing learning rate, in float and
// double; state interchangeable with LibTorch's (a run saved after fused steps continues under
// LibTorch's step, through torch::save/load, to the same values); amsgrad falls back to LibTorch's
// step exactly; results independent of the thread count; clear_gradients and restore_unused_gradients
// give zero_grad's steps bit for bit; adamw_update (one tensor, the audit probes'
// step) is adamw_step's loop bit for bit and refuses tensors it does not cover.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <sstream>

#include "model/tensor_compare.hpp"
#include "train/adamw.hpp"

using namespace arcal;
using arcal::test::max_rel;

namespace {

std::vector<torch::Tensor> make_params(torch::Dtype dtype) {
  torch::manual_seed(21);
  const auto opt = torch::TensorOptions().dtype(dtype);
  std::vector<torch::Tensor> ps;
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{64, 64}, {64}, {7}, {3, 5}, {2, 9}})
    ps.push_back(torch::randn(shape, opt).requires_grad_(true));
  return ps;
}

// Steps t = 1..n with gradients g_t = f(seed, t) on every parameter but the last (no gradient: skipped).
void run_steps(torch::optim::AdamW& opt, std::vector<torch::Tensor>& ps, int from, int to, bool fused) {
  for (int t = from; t <= to; ++t) {
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(1e-3 * (1 + 0.3 * t));
    torch::manual_seed(100 + t);
    for (std::size_t i = 0; i + 1 < ps.size(); ++i) ps[i].mutable_grad() = torch::randn_like(ps[i]) * (0.1 + i);
    ps.back().mutable_grad() = torch::Tensor();
    if (fused)
      adamw_step(opt);
    else
      opt.step();
  }
}

torch::optim::AdamWOptions options() { return torch::optim::AdamWOptions(2e-3).weight_decay(0.05); }

void check_against_libtorch(torch::Dtype dtype, double tol) {
  auto a = make_params(dtype), b = make_params(dtype);
  torch::optim::AdamW fused(a, options()), ref(b, options());
  run_steps(fused, a, 1, 10, true);
  run_steps(ref, b, 1, 10, false);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(max_rel(a[i], b[i]), tol) << "parameter " << i;
    const auto key_a = static_cast<void*>(a[i].unsafeGetTensorImpl());
    const auto key_b = static_cast<void*>(b[i].unsafeGetTensorImpl());
    ASSERT_EQ(fused.state().count(key_a), ref.state().count(key_b)) << "parameter " << i;
    if (!ref.state().count(key_b)) continue;  // the parameter without a gradient has no state in either
    const auto& sa = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(key_a));
    const auto& sb = static_cast<torch::optim::AdamWParamState&>(*ref.state().at(key_b));
    EXPECT_EQ(sa.step(), sb.step());
    EXPECT_LE(max_rel(sa.exp_avg(), sb.exp_avg()), tol);
    EXPECT_LE(max_rel(sa.exp_avg_sq(), sb.exp_avg_sq()), tol);
  }
  EXPECT_TRUE(torch::equal(a.back(), b.back()));  // no gradient: untouched (no decay either)
}

}  // namespace

TEST(AdamwStep, MatchesLibTorchInDouble) { check_against_libtorch(torch::kDouble, 1e-13); }
TEST(AdamwStep, MatchesLibTorchInFloat) { check_against_libtorch(torch::kFloat, 1e-6); }

TEST(AdamwStep, StateContinuesUnderLibTorchThroughACheckpoint) {
  auto a = make_params(torch::kDouble), b = make_params(torch::kDouble);
  torch::optim::AdamW first(a, options()), ref(b, options());
  run_steps(first, a, 1, 4, true);
  std::stringstream buf;
  {
    torch::serialize::OutputArchive ar;
    first.save(ar);
    ar.save_to(buf);
  }
  torch::optim::AdamW resumed(a, options());
  {
    torch::serialize::InputArchive ar;
    ar.load_from(buf);
    resumed.load(ar);
  }
  run_steps(resumed, a, 5, 8, false);  // LibTorch's step on the fused steps' state
  run_steps(ref, b, 1, 8, false);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_LE(max_rel(a[i], b[i]), 1e-13) << "parameter " << i;
}

TEST(AdamwStep, AmsgradFallsBackToLibTorch) {
  auto a = make_params(torch::kFloat), b = make_params(torch::kFloat);
  torch::optim::AdamW fused(a, options().amsgrad(true)), ref(b, options().amsgrad(true));
  run_steps(fused, a, 1, 3, true);
  run_steps(ref, b, 1, 3, false);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

TEST(AdamwStep, ResultsDoNotDependOnTheThreadCount) {
  const int before = at::get_num_threads();
  std::vector<torch::Tensor> out;
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    torch::manual_seed(5);
    auto p = torch::randn({1 << 17}).requires_grad_(true);  // several parallel chunks
    std::vector<torch::Tensor> ps{p, torch::randn({1}).requires_grad_(true)};
    torch::optim::AdamW opt(ps, options());
    run_steps(opt, ps, 1, 3, true);
    out.push_back(p.detach().clone());
  }
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(out[0], out[1]));
}

// adamw_update on bare tensors against adamw_step on the same parameters: the same loop, so equal bit
// for bit, with the optimizer's lr, weight decay, betas, eps and step count passed by hand.
TEST(AdamwUpdate, IsTheStepsLoopOnOneTensor) {
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    auto a = make_params(dtype);
    std::vector<torch::Tensor> p, m, v;
    for (std::size_t i = 0; i + 1 < a.size(); ++i) {
      p.push_back(a[i].detach().clone());
      m.push_back(torch::zeros_like(p.back()));
      v.push_back(torch::zeros_like(p.back()));
    }
    torch::optim::AdamW opt(a, options());
    for (int t = 1; t <= 6; ++t) {
      const double lr = 1e-3 * (1 + 0.3 * t);
      for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
      torch::manual_seed(100 + t);
      for (std::size_t i = 0; i < p.size(); ++i) {
        a[i].mutable_grad() = torch::randn_like(a[i]) * (0.1 + i);
        adamw_update(p[i], a[i].grad(), m[i], v[i], lr, 0.05, 0.9, 0.999, 1e-8, t);
      }
      a.back().mutable_grad() = torch::Tensor();
      adamw_step(opt);
    }
    for (std::size_t i = 0; i < p.size(); ++i) EXPECT_TRUE(torch::equal(p[i], a[i].detach())) << "parameter " << i;
  }
}

TEST(AdamwUpdate, RefusesTensorsTheLoopDoesNotCover) {
  auto p = torch::zeros({4, 3}), g = torch::ones({4, 3}), m = torch::zeros({4, 3}), v = torch::zeros({4, 3});
  EXPECT_THROW(adamw_update(p, g, m, v, 1e-3, 0.0, 0.9, 0.999, 1e-8, 0), std::invalid_argument);      // step 0
  EXPECT_THROW(adamw_update(p, g.t(), m, v, 1e-3, 0.0, 0.9, 0.999, 1e-8, 1), std::invalid_argument);  // shape
  auto half = torch::zeros({4, 3}, torch::kBFloat16);
  EXPECT_THROW(adamw_update(half, half, half, half, 1e-3, 0.0, 0.9, 0.999, 1e-8, 1), std::invalid_argument);
  auto strided = torch::zeros({3, 4}).t();
  EXPECT_THROW(adamw_update(strided, g, m, v, 1e-3, 0.0, 0.9, 0.999, 1e-8, 1), std::invalid_argument);
  adamw_update(p, g, m, v, 1e-3, 0.0, 0.9, 0.999, 1e-8, 1);  // covered: the first step moves p by -lr
  EXPECT_NEAR(p[0][0].item<float>(), -1e-3, 1e-9);
}

// clear_gradients + backward + restore_unused_gradients give the trainer's steps exactly what
// zero_grad() + backward gave: parameters bitwise equal after eight AdamW steps of a small network
// whose second layer is left out of the loss at steps 4 and 6 (zero_grad leaves its gradient at
// zeros, so AdamW still decays it and moves its moments; restore_unused_gradients must do the same),
// and whose third parameter is never used (no gradient, no state, never touched in either).
TEST(ClearGradients, StepsAreZeroGradsBitForBit) {
  auto make = [] {
    torch::manual_seed(3);
    return std::vector<torch::Tensor>{torch::randn({16, 8}).requires_grad_(true),
                                      torch::randn({4, 16}).requires_grad_(true),
                                      torch::randn({5}).requires_grad_(true)};
  };
  auto a = make(), b = make();
  torch::optim::AdamW cleared(a, options()), zeroed(b, options());
  for (int t = 1; t <= 8; ++t) {
    torch::manual_seed(200 + t);
    const auto x = torch::randn({32, 8});
    const bool skip_second = t == 4 || t == 6;
    auto loss = [&](const std::vector<torch::Tensor>& p) {
      const auto h = torch::tanh(x.mm(p[0].t()));
      return skip_second ? h.square().mean() : h.mm(p[1].t()).square().mean();
    };
    clear_gradients(cleared);
    loss(a).backward();
    restore_unused_gradients(cleared);
    adamw_step(cleared);
    zeroed.zero_grad(/*set_to_none=*/false);  // LibTorch 2 defaults to set_to_none; the trainer keeps zeros
    loss(b).backward();
    adamw_step(zeroed);
    if (skip_second) {
      ASSERT_TRUE(a[1].grad().defined()) << "step " << t;  // zeros restored, as zero_grad left them
      EXPECT_EQ(a[1].grad().abs().sum().item<float>(), 0.0f);
    }
    EXPECT_FALSE(a[2].grad().defined());
  }
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  EXPECT_FALSE(torch::equal(a[1], make()[1]));  // the second layer did move (a test that can fail)
  EXPECT_TRUE(torch::equal(a[2], make()[2]));
}
