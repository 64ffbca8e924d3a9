// Routing interventions and the routing-equivalent wrapper (method.md §1, §7): an empty ablation
// changes nothing bit for bit; an ablated family gets exactly zero weight and the rest sums to 1;
// a standard-residual run loaded --as-attnres routes exactly 1/S_p and reproduces the standard
// logits (1e-5 relative at ε = 0).
#include <algorithm>
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.hpp"
#include "model/intervene.hpp"
#include "train/trainer.hpp"

using namespace arcal;
namespace fs = std::filesystem;

namespace {
ARViT trained_like_model(ResidualMode mode) {
  torch::manual_seed(21);
  ARViT m(make_model_config("ar-vit-tiny", 28, 1, 10, mode, 2));
  torch::NoGradGuard g;
  auto p = m->named_parameters();
  p["pseudo_query"].normal_(0.0, 0.5);
  return m;
}
}  // namespace

TEST(Intervene, EmptyAblationIsBitIdentical) {
  auto m = trained_like_model(ResidualMode::Full);
  m->eval();
  auto x = torch::randn({5, 1, 28, 28});
  RoutingAblation none;
  RoutingAblation empty_lists;
  empty_lists.drop_sources.assign(13, {});
  auto a = m->forward(x), b = m->forward(x, nullptr, &none), c = m->forward(x, nullptr, &empty_lists);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_TRUE(torch::equal(a, c));
}

TEST(Intervene, AblatedFamilyHasZeroWeightAndTheRestSumsToOne) {
  auto m = trained_like_model(ResidualMode::Block);
  const auto S = m->config().sources_per_point();
  auto x = torch::randn({3, 1, 28, 28});
  for (const std::string fam : {"embedding", "current", "history"}) {
    RoutingAblation abl;
    abl.drop_sources.assign(S.size(), {});
    for (std::size_t p = 0; p < S.size(); ++p) abl.drop_sources[p] = family_sources(fam, S[p]);
    RoutingCapture cap;
    m->forward(x, &cap, &abl);
    for (std::size_t p = 0; p < S.size(); ++p) {
      for (int s : abl.drop_sources[p]) EXPECT_EQ(cap.alpha[p][s].abs().max().item<float>(), 0.0f) << fam << " p" << p;
      EXPECT_LT((cap.alpha[p].sum(0) - 1).abs().max().item<float>(), 1e-6f) << fam << " p" << p;
    }
  }
  EXPECT_EQ(family_sources("history", 2).size(), 0u);
  EXPECT_EQ(family_sources("history", 5), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(family_sources("current", 1).size(), 0u);
  EXPECT_THROW(family_sources("recent", 3), InputError);
}

TEST(Intervene, FamilyMassesPartitionEachPoint) {
  // The three families partition a point's sources, so their masses sum to 1 where all exist;
  // KL is non-negative and its interval brackets the estimate.
  auto m = trained_like_model(ResidualMode::Full);
  TensorData data{torch::randn({40, 1, 28, 28}), torch::randint(0, 10, {40}, torch::kLong), 10};
  InterventionOptions o;
  o.points = {3, 12};
  o.bootstrap = 50;
  auto rep = run_interventions(m, data, o);
  // Per point (3: MLP, 12: final) x 3 families, then every family at all points and at the MLP
  // points (no attention point was chosen).
  ASSERT_EQ(rep.effects.size(), 3u * 2u + 3u + 3u);
  double mass_p3 = 0;
  for (const auto& e : rep.effects)
    if (e.point == 3) mass_p3 += e.mass;
  EXPECT_NEAR(mass_p3, 1.0, 1e-6);
  for (const auto& e : rep.effects) {
    EXPECT_GE(e.mean_kl, 0.0);
    EXPECT_LE(e.mean_kl_ci.low, e.mean_kl + 1e-12);
  }
}

TEST(RoutingEquivalentWrapper, StandardRunLoadsAsUniformAttnResWithSameLogits) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
  const std::string bin = std::string(ARCAL_BINARY_DIR) + "/arcal";
  const auto run = (fs::path(ARCAL_BINARY_DIR) / "test_tmp" / "wrapper_std").string();
  fs::remove_all(run);
  ASSERT_EQ(std::system(
                (bin + " train --residual standard --train-subset 1280 --batch-size 64 --max-steps 20 --quiet --out " +
                 run + " > /dev/null")
                    .c_str()),
            0);
  torch::manual_seed(20);
  auto x = torch::randn({16, 1, 28, 28});
  for (const std::string mode : {"full", "block"}) {
    LoadOptions exact;
    exact.norm_eps = 0.0;
    auto standard = load_trained_model(run, nullptr, exact);
    exact.as_attnres = mode;
    auto wrapped = load_trained_model(run, nullptr, exact);
    torch::NoGradGuard g;
    RoutingCapture cap;
    auto a = standard->forward(x), b = wrapped->forward(x, &cap);
    const double rel = ((b - a).abs().max() / a.abs().max()).item<double>();
    EXPECT_LT(rel, 1e-5) << mode;
    // The library's wrapper check (written by arcal intervene --as-attnres) gives the same number.
    const WrapperCheck w = check_wrapper(standard, wrapped, TensorData{x, torch::zeros({16}, torch::kLong), 10}, 16);
    // Both are float32 round-off at eps 0 (about 2e-7); two forward passes may round alike or not.
    EXPECT_NEAR(w.max_rel_logit_diff, rel, 5e-7) << mode;
    EXPECT_LE(w.max_routing_deviation, 1e-7) << mode;
    EXPECT_EQ(w.examples, 16);
    const auto S = wrapped->config().sources_per_point();
    ASSERT_EQ(cap.alpha.size(), S.size());
    for (std::size_t p = 0; p < S.size(); ++p)
      EXPECT_LE((cap.alpha[p] - 1.0f / float(S[p])).abs().max().item<float>(), 1e-7f) << mode << " p" << p;
    // At the default epsilon the equivalence is approximate (method.md §1): report the size.
    LoadOptions dflt;
    auto std_d = load_trained_model(run, nullptr, dflt);
    dflt.as_attnres = mode;
    auto wr_d = load_trained_model(run, nullptr, dflt);
    auto ad = std_d->forward(x), bd = wr_d->forward(x);
    const double rel_d = ((bd - ad).abs().max() / ad.abs().max()).item<double>();
    std::printf("  wrapper %s: max rel logit difference %.2e at eps 0, %.2e at eps 1e-6\n", mode.c_str(), rel, rel_d);
    // Of order S_p^2 eps (method.md §1) with a constant the method does not fix: measured 4-7 here
    // (5e-4 to 1.1e-3 for Full, S_p <= 13, over unseeded inputs, fused and composite alike).
    int smax = 0;
    for (int sp : S) smax = std::max(smax, sp);
    EXPECT_LT(rel_d, 10.0 * smax * smax * 1e-6) << mode;
  }
  // An unknown wrapper mode is refused.
  LoadOptions bad;
  bad.as_attnres = "sideways";
  EXPECT_THROW(load_trained_model(run, nullptr, bad), InputError);
}
