// AR-LM tests (issue 27): agreement with the independent PyTorch reference
// (tests/reference/attnres_lm_ref.py, float64) on logits, per-token routing and every gradient for
// Full, Block and the standard twin, tied and untied heads; causality (a later token never changes an
// earlier position's logits); uniform routing at initialisation; the config's JSON round trip; and
// the errors for tokens of the wrong dtype, length or range.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "model/ar_lm.hpp"
#include "model/tensor_compare.hpp"

using namespace arcal;
using arcal::test::max_rel;

namespace {

ModelConfig lm(ResidualMode mode, int block_size = 2, bool tied = true, int context = 16) {
  auto c = make_lm_config("ar-lm-tiny", context, mode, block_size);
  c.tie_weights = tied;
  c.dim = 32;  // small enough for a quick float64 reference
  c.depth = 2;
  c.heads = 4;
  return c;
}

void randomise(ARLM& m, std::uint64_t seed) {
  torch::NoGradGuard g;
  torch::manual_seed(seed);
  for (auto& kv : m->named_parameters()) {
    if (kv.key() == "pseudo_query")
      kv.value().normal_(0.0, 0.5);
    else if (kv.key() == "key_gain")
      kv.value().uniform_(0.5, 1.5);
    else if (kv.key().find("bias") != std::string::npos)
      kv.value().normal_(0.0, 0.02);  // exercised, not zero
  }
}

torch::Tensor next_token_loss(const torch::Tensor& logits, const torch::Tensor& tokens) {
  const auto K = logits.size(-1);
  return torch::cross_entropy_loss(logits.slice(1, 0, -1).reshape({-1, K}), tokens.slice(1, 1).reshape({-1}));
}

struct RefCase {
  ResidualMode mode;
  int block_size;
  int code;  // the reference's mode code: 0 standard, 1 full, 2 block
  bool tied;
};

void run_reference(const RefCase& rc) {
  torch::manual_seed(21);
  ARLM m(lm(rc.mode, rc.block_size, rc.tied));
  randomise(m, 22);
  auto tokens = torch::randint(0, 256, {3, 16}, torch::kLong);
  const auto& c = m->config();
  c10::Dict<std::string, torch::Tensor> dict;
  for (auto& kv : m->named_parameters()) dict.insert(kv.key(), kv.value().detach().clone());
  dict.insert("tokens", tokens);
  dict.insert("config", torch::tensor({double(c.dim), double(c.depth), double(c.heads), double(rc.code),
                                       double(c.block_size), c.norm_eps, rc.tied ? 1.0 : 0.0},
                                      torch::kDouble));
  const std::string tag = std::to_string(rc.code) + "_" + std::to_string(rc.block_size) + (rc.tied ? "t" : "u");
  const std::string in = std::string(ARCAL_BINARY_DIR) + "/lm_ref_in_" + tag + ".pt";
  const std::string out = std::string(ARCAL_BINARY_DIR) + "/lm_ref_out_" + tag + ".pt";
  {
    auto bytes = torch::pickle_save(c10::IValue(dict));
    std::ofstream f(in, std::ios::binary);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const std::string cmd =
      std::string(ARCAL_TEST_PYTHON) + " " + ARCAL_SOURCE_DIR + "/tests/reference/attnres_lm_ref.py " + in + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto ref = torch::pickle_load(bytes).toGenericDict();
  auto get = [&](const std::string& k) { return ref.at(k).toTensor(); };

  // float32, as trained: logits to 1e-5 of the float64 answer.
  {
    torch::NoGradGuard g;
    const double e = max_rel(m->forward(tokens), get("logits"));
    std::printf("  [%s S=%d %s] float32 logits max rel err %.2e\n", to_string(rc.mode).c_str(), rc.block_size,
                rc.tied ? "tied" : "untied", e);
    EXPECT_LT(e, 1e-5);
  }
  // float64: logits, routing and every gradient to round-off.
  m->to(torch::kDouble);
  RoutingCapture cap;
  auto z = m->forward(tokens, &cap);
  auto loss = next_token_loss(z, tokens);
  loss.backward();
  EXPECT_LT(max_rel(z, get("logits")), 1e-10);
  EXPECT_NEAR(loss.item<double>(), get("loss")[0].item<double>(), 1e-10);
  ASSERT_EQ(static_cast<int>(cap.alpha.size()), c.routing_points());
  for (std::size_t p = 0; p < cap.alpha.size(); ++p) {
    EXPECT_EQ(cap.alpha[p].sizes(), get("alpha." + std::to_string(p)).sizes()) << "point " << p;  // (S_p,B,T)
    EXPECT_LT(max_rel(cap.alpha[p], get("alpha." + std::to_string(p))), 1e-10) << "point " << p;
  }
  for (auto& kv : m->named_parameters())
    EXPECT_LT(max_rel(kv.value().grad(), get("grad." + kv.key())), 1e-9) << kv.key();
}

}  // namespace

TEST(ARLMReference, FullAttnResMatchesPyTorch) { run_reference({ResidualMode::Full, 1, 1, true}); }
TEST(ARLMReference, BlockAttnResMatchesPyTorch) { run_reference({ResidualMode::Block, 2, 2, true}); }
TEST(ARLMReference, BlockAttnResOddBlockUntiedHeadMatchesPyTorch) { run_reference({ResidualMode::Block, 3, 2, false}); }
TEST(ARLMReference, StandardTwinMatchesPyTorch) { run_reference({ResidualMode::Standard, 2, 0, true}); }

TEST(ARLM, LaterTokensNeverChangeEarlierLogits) {
  for (auto mode : {ResidualMode::Full, ResidualMode::Block, ResidualMode::Standard}) {
    torch::manual_seed(3);
    ARLM m(lm(mode));
    randomise(m, 4);
    torch::NoGradGuard g;
    auto a = torch::randint(0, 256, {2, 16}, torch::kLong);
    auto b = a.clone();
    b.slice(1, 9).random_(0, 256);  // change tokens 9..15
    auto za = m->forward(a), zb = m->forward(b);
    EXPECT_TRUE(torch::equal(za.slice(1, 0, 9), zb.slice(1, 0, 9))) << to_string(mode);
    EXPECT_FALSE(torch::allclose(za.slice(1, 9), zb.slice(1, 9))) << to_string(mode);
    // A shorter prefix gives the same logits at its positions.
    // float rounding of products over another number of rows (1.2e-6 with LibTorch 2.15)
    EXPECT_LT(max_rel(m->forward(a.slice(1, 0, 5)), za.slice(1, 0, 5)), 5e-6) << to_string(mode);
  }
}

TEST(ARLM, ZeroPseudoQueriesGiveUniformPerTokenRouting) {
  torch::manual_seed(5);
  ARLM m(lm(ResidualMode::Block, 2));
  RoutingCapture cap;
  torch::NoGradGuard g;
  auto z = m->forward(torch::randint(0, 256, {2, 7}, torch::kLong), &cap);
  EXPECT_EQ(z.sizes(), (std::vector<std::int64_t>{2, 7, 256}));
  const auto S = m->config().sources_per_point();
  ASSERT_EQ(cap.alpha.size(), S.size());
  for (std::size_t p = 0; p < S.size(); ++p) {
    EXPECT_EQ(cap.alpha[p].sizes(), (std::vector<std::int64_t>{S[p], 2, 7}));
    EXPECT_LE((cap.alpha[p] - 1.0f / float(S[p])).abs().max().item<float>(), 1e-7f);
  }
}

TEST(ARLM, ConfigRoundTripsThroughJson) {
  auto c = make_lm_config("ar-lm-tiny", 128, ResidualMode::Block, 2);
  EXPECT_EQ(c.tokens(), 128);
  EXPECT_EQ(c.classes, 256);
  EXPECT_TRUE(c.tie_weights);
  nlohmann::json j;
  to_json(j, c);
  auto back = model_config_from_json(j, "test");
  EXPECT_EQ(model_config_hash(back), model_config_hash(c));
  EXPECT_EQ(back.context, 128);
  EXPECT_TRUE(back.tie_weights);
  j.erase("tie_weights");
  EXPECT_THROW(model_config_from_json(j, "test"), InputError);
  j["tie_weights"] = true;
  j["context"] = 0;
  EXPECT_THROW(model_config_from_json(j, "test"), InputError);
  EXPECT_THROW(make_lm_config("ar-vit-tiny", 128, ResidualMode::Full, 1), InputError);
}

TEST(ARLM, BadTokensAreRejectedWithTheConstraint) {
  ARLM m(lm(ResidualMode::Full, 1));
  torch::NoGradGuard g;
  auto expect_error = [&](const torch::Tensor& t, const std::string& needle) {
    try {
      m->forward(t);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error(torch::zeros({2, 4}, torch::kInt), "int64");
  expect_error(torch::zeros({8}, torch::kLong), "(B,T)");
  expect_error(torch::zeros({1, 17}, torch::kLong), "context");
  expect_error(torch::full({1, 4}, 256, torch::kLong), "[0, 256)");
  expect_error(torch::full({1, 4}, -1, torch::kLong), "[0, 256)");
}
