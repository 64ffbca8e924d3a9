// The eval-mode attention backend of the ViT (model/layers.hpp) and the CEDAR backend
// (cedar/torch/cedar_torch.hpp): training never calls it, dense CEDAR and CEDAR with every chunk
// exact reproduce LibTorch's attention, and Swin refuses the hook.
#include <gtest/gtest.h>

#include "cedar/torch/cedar_torch.hpp"
#include "core/error.hpp"
#include "model/ar_vit.hpp"

namespace {

using namespace arcal;

ARViT small_vit() {
  torch::manual_seed(3);
  auto c = make_model_config("ar-vit-tiny", 28, 1, 10, ResidualMode::Full, 2);
  c.patch = 4;  // 7 x 7 + 1 = 50 tokens
  validate_model_config(c);
  return ARViT(c);
}

std::vector<std::int64_t> row_starts() {
  std::vector<std::int64_t> s = {0};
  for (int r = 0; r < 7; ++r) s.push_back(1 + 7 * r);
  return s;
}

TEST(AttentionBackend, UsedInEvalOnlyAndNeverInTraining) {
  ARViT m = small_vit();
  const auto x = torch::randn({3, 1, 28, 28});
  int calls = 0;
  m->set_attention_backend([&](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool) {
    ++calls;
    return torch::matmul(torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1))), -1), v);
  });
  m->train();
  m->forward(x);
  EXPECT_EQ(calls, 0);
  m->eval();
  torch::NoGradGuard g;
  const auto with_hook = m->forward(x);
  EXPECT_EQ(calls, m->config().depth);
  m->set_attention_backend({});
  EXPECT_TRUE(torch::allclose(with_hook, m->forward(x), 1e-6, 1e-6));
}

TEST(AttentionBackend, CedarDenseAndFullBudgetMatchLibTorch) {
  ARViT m = small_vit();
  m->eval();
  torch::NoGradGuard g;
  const auto x = torch::randn({4, 1, 28, 28});
  const auto ref = m->forward(x);
  const auto chunks = cedar::chunks_from_starts(row_starts(), 50);
  for (auto method : {cedar::Method::dense, cedar::Method::cedar, cedar::Method::topk}) {
    cedar::Options o;
    o.method = method;
    o.budget = 7;  // every row chunk exact
    o.sink_chunks = 1;
    auto tally = std::make_shared<cedar::ExpansionTally>();
    m->set_attention_backend(cedar::make_backend(chunks, o, tally));
    const double err = (m->forward(x) - ref).abs().max().item<double>();
    EXPECT_LT(err, 1e-4) << cedar::to_string(method);
    EXPECT_EQ(tally->queries, double(m->config().depth) * 4 * m->config().heads * 50);
  }
  // Summaries only is an approximation: close, not equal.
  cedar::Options s;
  s.method = cedar::Method::summary;
  s.sink_chunks = 1;
  m->set_attention_backend(cedar::make_backend(chunks, s));
  EXPECT_GT((m->forward(x) - ref).abs().max().item<double>(), 1e-6);
}

TEST(AttentionBackend, TensorsOfAnyLeadingShape) {
  const auto q = torch::randn({2, 3, 5, 8}), k = torch::randn({2, 3, 40, 8}), v = torch::randn({2, 3, 40, 8});
  cedar::Options o;
  o.method = cedar::Method::dense;
  auto [out, expanded] = cedar::attention_tensors(q, k, v, cedar::fixed_chunks(40, 10), o);
  const auto ref = torch::matmul(torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0), -1), v);
  EXPECT_TRUE(torch::allclose(out, ref, 1e-5, 1e-5));
  EXPECT_EQ(expanded.sizes(), torch::IntArrayRef({2, 3, 5}));
  EXPECT_THROW(cedar::attention_tensors(q, k.narrow(3, 0, 4), v, cedar::fixed_chunks(40, 10), o), InputError);
}

TEST(AttentionBackend, SwinHasNoHook) {
  auto c = make_model_config("ar-swin-tiny", 32, 3, 10, ResidualMode::Full, 2);
  ARViT m(c);
  EXPECT_THROW(m->set_attention_backend({}), InputError);
}

}  // namespace
