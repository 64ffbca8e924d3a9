// AR-ViT model tests: uniform routing at initialisation, equivalence with the standard twin,
// Block S = 1 == Full, normalised routing, and agreement with the independent PyTorch reference
// (tests/reference/attnres_ref.py, Debian's python3-torch) on logits, routing, gradients and AdamW steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "model/ar_vit.hpp"
#include "model/tensor_compare.hpp"
#include "train/sbece.hpp"

using namespace arcal;
using arcal::test::max_rel;

namespace {

ModelConfig tiny(ResidualMode mode, int block_size = 2, double eps = 1e-6) {
  auto c = make_model_config("ar-vit-tiny", 28, 1, 10, mode, block_size);
  c.norm_eps = eps;
  return c;
}

void copy_matching(ARViT& from, ARViT& to) {
  torch::NoGradGuard g;
  auto src = from->named_parameters();
  for (auto& kv : to->named_parameters())
    if (src.contains(kv.key())) kv.value().copy_(src[kv.key()]);
}

void randomise_routing(ARViT& m, std::uint64_t seed) {
  torch::NoGradGuard g;
  torch::manual_seed(seed);
  auto params = m->named_parameters();
  params["pseudo_query"].normal_(0.0, 0.5);
  params["key_gain"].uniform_(0.5, 1.5);
}

}  // namespace

TEST(ARViT, ZeroPseudoQueriesGiveExactlyUniformRouting) {
  for (auto mode : {ResidualMode::Full, ResidualMode::Block}) {
    torch::manual_seed(1);
    ARViT m(tiny(mode, 4));
    RoutingCapture cap;
    m->forward(torch::randn({3, 1, 28, 28}), &cap);
    const auto S = m->config().sources_per_point();
    ASSERT_EQ(cap.alpha.size(), S.size());
    for (std::size_t p = 0; p < S.size(); ++p) {
      ASSERT_EQ(cap.alpha[p].size(0), S[p]) << "point " << p;
      // softmax of S equal logits is 1/S exactly up to one rounding of exp/sum.
      auto expected = torch::full_like(cap.alpha[p], 1.0f / float(S[p]));
      EXPECT_LE((cap.alpha[p] - expected).abs().max().item<float>(), 1e-7f) << "point " << p;
    }
  }
}

TEST(ARViT, SourcesPerPointFollowBlockStructure) {
  // Full: point l sees l+1 sources; final sees L+1. Block S=4 with L=12: [1,2,3,4, 2,3,4,5, 3,4,5,6, 4].
  EXPECT_EQ(tiny(ResidualMode::Full).sources_per_point(),
            (std::vector<int>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}));
  EXPECT_EQ(tiny(ResidualMode::Block, 4).sources_per_point(),
            (std::vector<int>{1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4}));
}

TEST(ARViT, UniformRoutingReproducesStandardTwin) {
  // method.md §1: uniform routing divides the stream by the source count; pre-norms cancel it.
  for (auto mode : {ResidualMode::Full, ResidualMode::Block}) {
    for (int S : {2, 4}) {
      torch::manual_seed(2);
      ARViT standard(tiny(ResidualMode::Standard, 2, 0.0));
      ARViT attnres(tiny(mode, S, 0.0));
      copy_matching(standard, attnres);
      auto x = torch::randn({4, 1, 28, 28});
      auto a = standard->forward(x), b = attnres->forward(x);
      EXPECT_LT(max_rel(b, a), 1e-5) << to_string(mode) << " S=" << S;
      if (mode == ResidualMode::Full) break;
    }
  }
}

TEST(ARViT, BlockSizeOneEqualsFull) {
  torch::manual_seed(3);
  ARViT full(tiny(ResidualMode::Full));
  ARViT block(tiny(ResidualMode::Block, 1));
  randomise_routing(full, 4);
  copy_matching(full, block);
  auto x = torch::randn({2, 1, 28, 28});
  RoutingCapture ca, cb;
  auto a = full->forward(x, &ca), b = block->forward(x, &cb);
  EXPECT_TRUE(torch::equal(a, b));
  ASSERT_EQ(ca.alpha.size(), cb.alpha.size());
  for (std::size_t p = 0; p < ca.alpha.size(); ++p) EXPECT_TRUE(torch::equal(ca.alpha[p], cb.alpha[p]));
}

TEST(ARViT, RoutingWeightsSumToOneAndCaptureDoesNotChangeOutput) {
  torch::manual_seed(5);
  ARViT m(tiny(ResidualMode::Block, 2));
  randomise_routing(m, 6);
  m->eval();  // in training the pass without a capture is cut to the CLS token (test_first_token.cpp)
  auto x = torch::randn({2, 1, 28, 28});
  RoutingCapture cap;
  auto with = m->forward(x, &cap);
  auto without = m->forward(x);
  EXPECT_TRUE(torch::equal(with, without));
  for (auto& a : cap.alpha) {
    EXPECT_LT((a.sum(0) - 1.0).abs().max().item<float>(), 1e-6f);
    EXPECT_GE(a.min().item<float>(), 0.0f);
  }
  // Non-uniform routing really is non-uniform (a wrong capture of constants would pass the sum check).
  EXPECT_GT((cap.alpha.back() - cap.alpha.back().mean(0, true)).abs().max().item<float>(), 1e-3f);
}

TEST(SoftBinnedEce, MatchesHandComputation) {
  // Two examples, two classes, M = 2 bins, T = 0.05. Logits give confidences c = sigmoid(|z|).
  auto logits = torch::tensor({{2.0, 0.0}, {0.0, 0.5}}, torch::kDouble);
  auto labels = torch::tensor({0, 0}, torch::kLong);  // first correct, second wrong
  const double c1 = 1.0 / (1.0 + std::exp(-2.0)), c2 = 1.0 / (1.0 + std::exp(-0.5));
  const double a1 = 1.0, a2 = 0.0, T = 0.05;
  const double z[2] = {0.25, 0.75};
  double u[2][2];
  for (int i = 0; i < 2; ++i) {
    const double c = i == 0 ? c1 : c2;
    const double e0 = std::exp(-(c - z[0]) * (c - z[0]) / T), e1 = std::exp(-(c - z[1]) * (c - z[1]) / T);
    u[i][0] = e0 / (e0 + e1);
    u[i][1] = e1 / (e0 + e1);
  }
  double total = 0;
  for (int j = 0; j < 2; ++j) {
    const double s = u[0][j] + u[1][j];
    const double cb = (u[0][j] * c1 + u[1][j] * c2) / s, ab = (u[0][j] * a1 + u[1][j] * a2) / s;
    total += (s / 2.0) * (cb - ab) * (cb - ab);
  }
  const double expected = std::sqrt(total);
  auto got = soft_binned_ece(logits.to(torch::kFloat), labels, 2, T).item<double>();
  EXPECT_NEAR(got, expected, 1e-6);
}

TEST(SoftBinnedEce, GradientMatchesFiniteDifferences) {
  torch::manual_seed(7);
  auto logits = torch::randn({16, 5}, torch::kDouble);
  auto labels = torch::randint(0, 5, {16}, torch::kLong);
  auto f = [&](const torch::Tensor& z) {
    // Same computation in double precision (soft_binned_ece casts to float; the FD check needs double).
    auto p = torch::softmax(z, -1);
    auto [c, pred] = p.max(-1);
    auto a = pred.eq(labels).to(torch::kDouble);
    auto anchors = (torch::arange(15, torch::kDouble) + 0.5) / 15.0;
    auto u = torch::softmax(-(c.unsqueeze(1) - anchors).pow(2) / 0.01, 1);
    auto s = u.sum(0);
    auto cb = (u * c.unsqueeze(1)).sum(0) / s, ab = (u * a.unsqueeze(1)).sum(0) / s;
    return ((s / s.sum()) * (cb - ab).pow(2)).sum().sqrt();
  };
  auto z = logits.clone().requires_grad_(true);
  auto loss = soft_binned_ece(z, labels, 15, 0.01);
  loss.backward();
  auto analytic = z.grad();
  auto zd = logits.clone();
  const double h = 1e-6;
  double worst = 0;
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 5; ++k) {
      auto plus = zd.clone(), minus = zd.clone();
      plus[i][k] += h;
      minus[i][k] -= h;
      const double fd = (f(plus).item<double>() - f(minus).item<double>()) / (2 * h);
      worst = std::max(worst, std::abs(fd - analytic[i][k].item<double>()));
    }
  // float32 forward inside soft_binned_ece: gradient agrees with the double FD to ~1e-4 absolute.
  EXPECT_LT(worst, 2e-4);
  EXPECT_GT(analytic.abs().max().item<double>(), 1e-3);  // the check is not vacuous
  EXPECT_THROW(soft_binned_ece(logits, labels, 15, 0.0), std::exception);
  EXPECT_THROW(soft_binned_ece(logits, labels, 15, -0.01), std::exception);
}

// ---- independent PyTorch reference ----

namespace {

struct RefCase {
  ResidualMode mode;
  int block_size;
  int code;
};

void run_reference_case(const RefCase& rc) {
  const int steps = 5;
  const double lr = 1e-3, wd = 0.05, beta = 0.5, temp = 0.01;
  const int bins = 15;
  torch::manual_seed(11);
  ARViT m(tiny(rc.mode, rc.block_size));
  if (rc.mode != ResidualMode::Standard) randomise_routing(m, 12);
  auto images = torch::randn({8, 1, 28, 28});
  auto labels = torch::randint(0, 10, {8}, torch::kLong);
  const auto& c = m->config();

  c10::Dict<std::string, torch::Tensor> dict;
  for (auto& kv : m->named_parameters()) dict.insert(kv.key(), kv.value().detach().clone());
  dict.insert("images", images);
  dict.insert("labels", labels);
  dict.insert("config",
              torch::tensor({double(c.dim), double(c.depth), double(c.heads), double(c.patch), double(rc.code),
                             double(c.block_size), c.norm_eps, lr, wd, double(steps), beta, double(bins), temp},
                            torch::kDouble));
  const std::string tag = std::to_string(rc.code) + "_" + std::to_string(rc.block_size);
  const std::string in = std::string(ARCAL_BINARY_DIR) + "/ref_in_" + tag + ".pt";
  const std::string out = std::string(ARCAL_BINARY_DIR) + "/ref_out_" + tag + ".pt";
  {
    auto bytes = torch::pickle_save(c10::IValue(dict));
    std::ofstream f(in, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const std::string cmd =
      std::string(ARCAL_TEST_PYTHON) + " " + ARCAL_SOURCE_DIR + "/tests/reference/attnres_ref.py " + in + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto ref = torch::pickle_load(bytes).toGenericDict();
  auto get = [&](const std::string& k) { return ref.at(k).toTensor(); };

  // Forward and backward of the C++ model (float32) against the float64 reference.
  RoutingCapture cap;
  auto z = m->forward(images, &cap);
  auto loss = torch::cross_entropy_loss(z, labels) + beta * soft_binned_ece(z, labels, bins, temp);
  loss.backward();
  const double tol = 1e-4;
  double e = max_rel(z, get("logits"));
  std::printf("  [%s S=%d] logits max rel err %.2e\n", to_string(rc.mode).c_str(), rc.block_size, e);
  EXPECT_LT(e, tol);
  double worst_alpha = 0;
  for (std::size_t p = 0; p < cap.alpha.size(); ++p)
    worst_alpha = std::max(worst_alpha, max_rel(cap.alpha[p], get("alpha." + std::to_string(p))));
  std::printf("  [%s S=%d] routing (%zu points) max rel err %.2e\n", to_string(rc.mode).c_str(), rc.block_size,
              cap.alpha.size(), worst_alpha);
  EXPECT_LT(worst_alpha, tol);
  EXPECT_EQ(static_cast<int>(cap.alpha.size()), c.routing_points());
  for (auto& kv : m->named_parameters()) {
    double eg = max_rel(kv.value().grad(), get("grad." + kv.key()));
    std::printf("  [%s S=%d] grad %-22s max rel err %.2e\n", to_string(rc.mode).c_str(), rc.block_size,
                kv.key().c_str(), eg);
    EXPECT_LT(eg, tol) << kv.key();
  }
  // Five AdamW steps on the same batch in float64 (see attnres_ref.py): losses before each step.
  m->to(torch::kDouble);
  images = images.to(torch::kDouble);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(lr).weight_decay(wd));
  auto ref_losses = get("losses");
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    auto lg = m->forward(images);
    auto ls = torch::cross_entropy_loss(lg, labels) + beta * soft_binned_ece(lg, labels, bins, temp);
    ls.backward();
    opt.step();
    const double r = ref_losses[s].item<double>();
    const double rel = std::abs(ls.item<double>() - r) / std::abs(r);
    std::printf("  [%s S=%d] AdamW step %d loss %.6f ref %.6f rel err %.2e\n", to_string(rc.mode).c_str(),
                rc.block_size, s + 1, ls.item<double>(), r, rel);
    EXPECT_LT(rel, tol);
  }
}

}  // namespace

TEST(ARViTReference, FullAttnResMatchesPyTorch) { run_reference_case({ResidualMode::Full, 1, 1}); }
TEST(ARViTReference, BlockAttnResMatchesPyTorch) { run_reference_case({ResidualMode::Block, 4, 2}); }
TEST(ARViTReference, BlockAttnResOddBlockMatchesPyTorch) { run_reference_case({ResidualMode::Block, 3, 2}); }
TEST(ARViTReference, StandardTwinMatchesPyTorch) { run_reference_case({ResidualMode::Standard, 2, 0}); }
