// Issue 28: the language model's routing interventions, its wrapped standard twin, NoPE, and CEDAR
// in its causal prefill.
// - The interventions' bookkeeping on a language model: every token is an example, whole sequences
//   are resampled, the point types alternate attention/MLP/final, the masses of the families at a
//   point sum to 1, and each effect equals the token mean of a direct ablated forward pass.
// - The standard-residual LM loaded as AttnRes (uniform schedule) reproduces the standard logits
//   (1e-5 relative at eps 0) and routes exactly 1/S_p.
// - CEDAR (and hard top-k) with every chunk exact equals dense on the LM's own q/k/v and in the
//   whole model to 1e-5; causal prefill never reads a later token.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "cedar/torch/cedar_torch.hpp"
#include "cedar/torch/lm_prefill_study.hpp"
#include "core/error.hpp"
#include "io/text_corpus.hpp"
#include "model/intervene.hpp"
#include "train/trainer.hpp"

using namespace arcal;
namespace fs = std::filesystem;

namespace {

bool have_gcide() { return fs::exists(kGcideDict) && fs::exists(kGcideIndex); }

ARViT random_lm(ResidualMode mode, const std::string& preset = "ar-lm-tiny", int context = 64) {
  torch::manual_seed(28);
  ARViT m(make_lm_config(preset, context, mode, 2));
  torch::NoGradGuard g;
  auto p = m->named_parameters();
  if (p.contains("lm.pseudo_query")) p["lm.pseudo_query"].normal_(0.0, 0.5);  // non-uniform routing
  m->eval();
  return m;
}

TensorData random_text(std::int64_t n, std::int64_t T) {
  torch::manual_seed(7);
  TensorData d;
  d.images = torch::randint(0, 256, {n, T + 1}, torch::kLong).to(torch::kUInt8);
  d.labels = torch::arange(n, torch::kLong);
  d.classes = 256;
  d.text = true;
  return d;
}

/// q, k, v (H,T,hd) of the first attention layer's first sequence.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer0_qkv(ARViT& m, const torch::Tensor& tokens) {
  torch::Tensor q, k, v;
  bool first = true;
  m->set_attention_backend([&](const torch::Tensor& q4, const torch::Tensor& k4, const torch::Tensor& v4, bool causal) {
    EXPECT_TRUE(causal);
    if (first) q = q4[0].contiguous(), k = k4[0].contiguous(), v = v4[0].contiguous(), first = false;
    auto s = torch::matmul(q4, k4.transpose(-2, -1)) / std::sqrt(double(q4.size(-1)));
    const auto T = q4.size(-2);
    s = s.masked_fill(torch::ones({T, T}, torch::kBool).triu(1), -INFINITY);
    return torch::matmul(torch::softmax(s, -1), v4);
  });
  torch::NoGradGuard g;
  m->forward(tokens);
  m->set_attention_backend({});
  return {q, k, v};
}

}  // namespace

TEST(LmIntervene, PointTypesAlternateAndEffectsAreTokenMeansOverSequences) {
  auto m = random_lm(ResidualMode::Block);
  const auto types = point_sublayers(m->config());
  ASSERT_EQ(types.size(), 9u);  // 8 sublayers + the final aggregation
  EXPECT_EQ(types[0], "attention");
  EXPECT_EQ(types[1], "mlp");
  EXPECT_EQ(types[6], "attention");
  EXPECT_EQ(types[8], "final");
  const auto data = random_text(6, 24);
  InterventionOptions o;
  o.bootstrap = 200;
  o.batch_tokens = 50;  // two sequences per pass: the sums must not depend on the batching
  const auto rep = run_interventions(m, data, o);
  EXPECT_EQ(rep.unit, "token");
  EXPECT_EQ(rep.n, 6 * 24);
  EXPECT_EQ(rep.clusters, 6);
  const auto S = m->config().sources_per_point();
  std::map<int, double> mass_at;
  bool saw_attention_group = false, saw_mlp_group = false;
  for (const auto& e : rep.effects) {
    if (e.point >= 0) {
      mass_at[e.point] += e.mass;
      EXPECT_EQ(e.sublayer, types[std::size_t(e.point)]);
    }
    saw_attention_group = saw_attention_group || (e.point < 0 && e.sublayer == "attention");
    saw_mlp_group = saw_mlp_group || (e.point < 0 && e.sublayer == "mlp");
    EXPECT_LE(e.mean_kl_ci.low, e.mean_kl + 1e-12);
    EXPECT_GE(e.mean_kl_ci.high, e.mean_kl - 1e-12);
  }
  EXPECT_TRUE(saw_attention_group && saw_mlp_group);
  for (const auto& [p, mass] : mass_at) {
    if (S[std::size_t(p)] >= 3) {
      EXPECT_NEAR(mass, 1.0, 1e-6) << "point " << p;  // all three families exist
    }
  }
  // One effect recomputed directly: the current state ablated at point 3, as a token mean.
  const InterventionEffect* e3 = nullptr;
  for (const auto& e : rep.effects)
    if (e.point == 3 && e.family == "current") e3 = &e;
  ASSERT_NE(e3, nullptr);
  RoutingAblation abl;
  abl.drop_sources.assign(S.size(), {});
  abl.drop_sources[3] = family_sources("current", S[3]);
  torch::NoGradGuard g;
  const auto tok = data.images.to(torch::kLong);
  const auto x = tok.narrow(1, 0, 24), y = tok.narrow(1, 1, 24).unsqueeze(-1);
  const auto lp0 = torch::log_softmax(m->forward(x).to(torch::kDouble), -1);
  const auto lp1 = torch::log_softmax(m->forward(x, nullptr, &abl).to(torch::kDouble), -1);
  const double dnll = (lp0.gather(-1, y) - lp1.gather(-1, y)).mean().item<double>();
  const double kl = (lp0.exp() * (lp0 - lp1)).sum(-1).mean().item<double>();
  // float32 forward passes of other batch compositions round differently: 1e-7 nats.
  EXPECT_NEAR(e3->delta_nll, dnll, 1e-7);
  EXPECT_NEAR(e3->mean_kl, kl, 1e-7);
  // The mass-importance rows: attention, mlp and all, each naming families that exist.
  ASSERT_EQ(rep.mass_importance.size(), 3u);
  EXPECT_EQ(rep.mass_importance[0].sublayer, "attention");
  EXPECT_EQ(rep.mass_importance[1].sublayer, "mlp");
  for (const auto& mi : rep.mass_importance) {
    EXPECT_FALSE(mi.largest_mass_family.empty());
    EXPECT_LE(mi.dissociated_points, mi.points);
  }
  // An image split on the language model, and a text split on a ViT, are refused.
  TensorData images{torch::randn({2, 1, 28, 28}), torch::zeros({2}, torch::kLong), 10};
  EXPECT_THROW(run_interventions(m, images, o), InputError);
}

TEST(LmIntervene, MassImportanceCountsDissociationsButNotTies) {
  // Hand-made rows: at the MLP point 1 the largest mass (history) is not the largest effect
  // (embedding); at the attention point 0 two families tie in mass (a uniform schedule) and the
  // largest effect is one of them: no dissociation.
  auto row = [](int point, const std::string& sub, const std::string& fam, double mass, double kl, double lo,
                double hi) {
    InterventionEffect e;
    e.point = point;
    e.sublayer = sub;
    e.family = fam;
    e.mass = mass;
    e.mean_kl = kl;
    e.delta_nll = (lo + hi) / 2;
    e.delta_nll_ci = {lo, hi};
    return e;
  };
  InterventionReport rep;
  rep.effects = {
      row(0, "attention", "embedding", 0.5, 0.01, 0.01, 0.02), row(0, "attention", "current", 0.5, 0.30, 0.2, 0.4),
      row(1, "mlp", "embedding", 0.2, 0.90, 0.8, 1.0),         row(1, "mlp", "history", 0.6, 0.05, -0.01, 0.02),
      row(1, "mlp", "current", 0.2, 0.10, 0.05, 0.1),          row(-1, "attention", "embedding", 0.5, 0.01, 0.01, 0.02),
      row(-1, "attention", "current", 0.5, 0.30, 0.2, 0.4),    row(-1, "mlp", "embedding", 0.2, 0.90, 0.8, 1.0),
      row(-1, "mlp", "history", 0.6, 0.05, -0.01, 0.02),       row(-1, "mlp", "current", 0.2, 0.10, 0.05, 0.1)};
  const auto mi = mass_importance(rep, {"attention", "mlp", "final"});
  ASSERT_EQ(mi.size(), 2u);  // no "all" rows were given
  EXPECT_EQ(mi[0].sublayer, "attention");
  EXPECT_FALSE(mi[0].dissociated);
  EXPECT_EQ(mi[0].dissociated_points, 0);
  EXPECT_EQ(mi[1].sublayer, "mlp");
  EXPECT_TRUE(mi[1].dissociated);
  EXPECT_EQ(mi[1].largest_mass_family, "history");
  EXPECT_EQ(mi[1].largest_effect_family, "embedding");
  EXPECT_EQ(mi[1].dissociated_points, 1);
  EXPECT_EQ(mi[1].points, 1);
  EXPECT_EQ(mi[1].mass_without_effect, (std::vector<std::string>{"history"}));  // 0.6 mass, ΔNLL interval holds 0
  // Ranks with ties averaged: masses (1.5, 3, 1.5) against KL (3, 1, 2): r = -1.5 / sqrt(1.5 * 2).
  EXPECT_NEAR(mi[1].spearman_mass_kl, -std::sqrt(3.0) / 2, 1e-12);
}

TEST(LmIntervene, ClusterIntervalsResampleWholeSequences) {
  // Six copies of each of two sequences (means a and b): a resample of whole sequences holds k of
  // the first kind, k ~ Binomial(12, 1/2), so its mean is b + (a - b) k / 12 and the 95 % interval
  // spans about k = 3..9, half of |a - b| (closed form). A token-level bootstrap would instead give a
  // width set by the per-token spread over 192 tokens, unrelated to |a - b|.
  auto m = random_lm(ResidualMode::Full);
  auto base = random_text(2, 16);
  TensorData twelve = base;
  twelve.images = base.images.repeat({6, 1});
  twelve.labels = torch::arange(12, torch::kLong);
  InterventionOptions o;
  o.points = {4};
  o.families = {"embedding"};
  o.bootstrap = 400;
  const auto r = run_interventions(m, twelve, o);
  const auto& e = r.effects.front();
  EXPECT_LT(e.delta_nll_ci.low, e.delta_nll_ci.high);
  // The resampled means lie between the two sequences' own means.
  TensorData one = base;
  one.images = base.images.narrow(0, 0, 1);
  one.labels = base.labels.narrow(0, 0, 1);
  TensorData two = base;
  two.images = base.images.narrow(0, 1, 1);
  two.labels = base.labels.narrow(0, 1, 1);
  o.bootstrap = 1;
  const double a = run_interventions(m, one, o).effects.front().delta_nll;
  const double b = run_interventions(m, two, o).effects.front().delta_nll;
  // a and b come from one-sequence forward passes, the effect from one pass over 12: float32
  // rounding differs by batch composition (1e-7 nats).
  EXPECT_GE(e.delta_nll_ci.low, std::min(a, b) - 1e-7);
  EXPECT_LE(e.delta_nll_ci.high, std::max(a, b) + 1e-7);
  EXPECT_NEAR(e.delta_nll, (a + b) / 2, 1e-7);
  const double width = (e.delta_nll_ci.high - e.delta_nll_ci.low) / std::abs(a - b);
  EXPECT_GT(width, 0.3);  // k = 3..9 gives 0.5; 400 draws may land on k = 2..10 (0.67)
  EXPECT_LT(width, 0.75);
}

TEST(LmNope, RunsPastItsContextWhereLearnedPositionsRefuse) {
  auto learned = random_lm(ResidualMode::Block, "ar-lm-tiny", 32);
  auto nope = random_lm(ResidualMode::Block, "ar-lm-tiny-nope", 32);
  const auto x = torch::randint(0, 256, {1, 80}, torch::kLong);
  torch::NoGradGuard g;
  EXPECT_THROW(learned->forward(x), InputError);
  EXPECT_EQ(nope->forward(x).sizes(), (std::vector<std::int64_t>{1, 80, 256}));
  EXPECT_FALSE(nope->named_parameters().contains("lm.pos_embed"));
  // Causal: the first 32 positions' logits do not depend on what follows.
  const auto y = nope->forward(x.narrow(1, 0, 32));
  // Float rounding only: the two passes differ in length (32 against 80 tokens), so the products and
  // the attention's padded score rows round differently, and the difference grows through the
  // layers (4e-6 of the largest logit here); a future token leaking into a position would move its
  // logits by orders of magnitude more.
  const double diff = (nope->forward(x).narrow(1, 0, 32) - y).abs().max().item<double>();
  EXPECT_LT(diff, 1e-5 * std::max(1.0, y.abs().max().item<double>()));
  // The config round-trips, and a learned-position config's JSON (and so its hash) has no new key.
  nlohmann::json jn = nope->config(), jl = learned->config();
  EXPECT_EQ(jn.at("positions"), "none");
  EXPECT_FALSE(jl.contains("positions"));
  EXPECT_FALSE(jn.get<ModelConfig>().learned_positions);
  EXPECT_TRUE(jl.get<ModelConfig>().learned_positions);
  jn["positions"] = "rotary";
  EXPECT_THROW(jn.get<ModelConfig>(), InputError);
}

TEST(LmCedar, FullBudgetEqualsDenseOnTheModelsOwnQkvAndLogits) {
  for (const std::string preset : {"ar-lm-tiny", "ar-lm-tiny-nope"}) {
    auto m = random_lm(ResidualMode::Block, preset, 200);
    const auto x = torch::randint(0, 256, {2, 200}, torch::kLong);
    auto [q, k, v] = layer0_qkv(m, x);
    // The reference: LibTorch's masked product on the layer's own q/k/v.
    auto s = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
    s = s.masked_fill(torch::ones({200, 200}, torch::kBool).triu(1), -INFINITY);
    const auto ref = torch::matmul(torch::softmax(s, -1), v);
    const auto chunks = cedar::fixed_chunks(200, 16);  // 13 chunks, the last of 8 tokens
    for (auto method : {cedar::Method::dense, cedar::Method::cedar, cedar::Method::topk}) {
      cedar::Options o;
      o.method = method;
      o.budget = chunks.chunks();
      o.sink_chunks = 1;
      o.causal = true;
      const auto out = cedar::attention_tensors(q, k, v, chunks, o).first;
      const double rel = ((out - ref).norm() / ref.norm()).item<double>();
      EXPECT_LT(rel, 1e-5) << preset << " " << cedar::to_string(method);
    }
    // The whole model, every layer through the backend, against the model's own attention.
    torch::NoGradGuard g;
    const auto want = m->forward(x);
    for (auto method : {cedar::Method::dense, cedar::Method::cedar, cedar::Method::topk}) {
      cedar::Options o;
      o.method = method;
      o.budget = 1000;
      o.sink_chunks = 1;
      auto tally = std::make_shared<cedar::ExpansionTally>();
      m->set_attention_backend(cedar::make_backend_fixed(16, o, tally));
      const auto got = m->forward(x);
      const double rel = ((got - want).norm() / want.norm()).item<double>();
      EXPECT_LT(rel, 1e-5) << preset << " " << cedar::to_string(method);
      EXPECT_EQ(tally->queries, double(m->config().depth) * 2 * m->config().heads * 200);
    }
    // Causal prefill through the backend: position t never sees a later token.
    cedar::Options o;
    o.budget = 2;
    o.sink_chunks = 1;
    m->set_attention_backend(cedar::make_backend_fixed(16, o));
    auto x2 = x.clone();
    x2.narrow(1, 150, 50).random_(0, 256);
    const auto a = m->forward(x).narrow(1, 0, 144), b = m->forward(x2).narrow(1, 0, 144);
    EXPECT_LT((a - b).abs().max().item<double>(), 1e-5) << preset;
    m->set_attention_backend({});
  }
}

TEST(LmTwin, WrappedStandardLmIsUniformAndReproducesTheLogits) {
  if (!have_gcide()) GTEST_SKIP() << "no dict-gcide";
  const std::string bin = std::string(ARCAL_BINARY_DIR) + "/arcal";
  const auto dir = fs::path(ARCAL_BINARY_DIR) / "test_tmp" / "lm_twin";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string run = (dir / "run").string();
  ASSERT_EQ(std::system((bin +
                         " train --dataset gcide --model ar-lm-tiny-nope --residual standard --context 64"
                         " --train-subset 64 --batch-size 8 --max-steps 3 --val-fraction 0.002 --quiet --out " +
                         run + " > /dev/null")
                            .c_str()),
            0);
  // Past the training context (NoPE), through the library's wrapper check (the ViT's test in
  // test_intervene.cpp computes the same two numbers by hand).
  TensorData seqs = random_text(3, 96);
  for (const std::string mode : {"full", "block"}) {
    LoadOptions exact;
    exact.norm_eps = 0.0;
    auto standard = load_trained_model(run, nullptr, exact);
    exact.as_attnres = mode;
    auto wrapped = load_trained_model(run, nullptr, exact);
    const WrapperCheck w = check_wrapper(standard, wrapped, seqs, 3);
    EXPECT_LT(w.max_rel_logit_diff, 1e-5) << mode;
    EXPECT_LE(w.max_routing_deviation, 1e-7) << mode;
    EXPECT_EQ(w.examples, 3 * 96);
    EXPECT_THROW(check_wrapper(wrapped, standard, seqs, 3), InputError);  // the roles swapped
  }
  // The CLI: arcal intervene on the wrapped twin writes token-level effects whose masses are the
  // schedule's 1/S_p, and cedar-lm runs the prefill study on the run.
  const std::string out = (dir / "intervene.json").string();
  ASSERT_EQ(std::system((bin + " intervene --run " + run +
                         " --as-attnres block --subset 4 --bootstrap 50 --json --out " + out + " > /dev/null")
                            .c_str()),
            0);
  InterventionResults res = nlohmann::json::parse(std::ifstream(out));
  EXPECT_EQ(res.report.unit, "token");
  EXPECT_EQ(res.report.clusters, 4);
  // The wrapper check written beside the effects: routing exactly 1/S_p; logits at the default
  // epsilon within the documented order (S_p^2 eps, far below 1e-3).
  ASSERT_TRUE(res.has_wrapper_check);
  EXPECT_LE(res.wrapper_check.max_routing_deviation, 1e-7);
  EXPECT_LT(res.wrapper_check.max_rel_logit_diff, 1e-3);
  EXPECT_EQ(res.wrapper_check.examples, 4 * 64);
  const ModelConfig wc = load_trained_model(run, nullptr, LoadOptions{"block", 2, -1.0})->config();
  const auto S = wc.sources_per_point();
  for (const auto& e : res.report.effects) {
    if (e.point >= 0) {
      EXPECT_NEAR(e.mass, double(family_sources(e.family, S[std::size_t(e.point)]).size()) / S[std::size_t(e.point)],
                  1e-6);
    }
  }
  cedar::LmStudyConfig c;
  c.run = run;
  c.contexts = {64, 128};
  c.budgets = {1, 8};
  c.chunk = 16;
  c.tokens = 256;
  c.timing_contexts = {128};
  c.bootstrap = 50;
  c.threads = 1;
  const auto r = cedar::run_lm_study(c);
  ASSERT_EQ(r.contexts.size(), 2u);
  EXPECT_TRUE(r.contexts[1].beyond_training);
  for (const auto& ctx : r.contexts) {
    EXPECT_EQ(ctx.arms.front().method, "dense");
    EXPECT_EQ(ctx.arms.front().d_bits_per_byte.value, 0.0);
    for (const auto& a : ctx.arms)
      if (a.budget >= ctx.chunks - 2 && a.method != "dense") {  // every visible chunk exact: dense
        EXPECT_NEAR(a.bits_per_byte.value, ctx.arms.front().bits_per_byte.value, 1e-5) << a.method;
        EXPECT_GT(a.agreement, 0.999);
      }
  }
  ASSERT_EQ(r.timings.size(), 1u);
  EXPECT_LT(r.timings[0].libtorch_vs_dense_error, 1e-5);
  EXPECT_GE(r.timings[0].cedar_seconds, 0.0);
}
