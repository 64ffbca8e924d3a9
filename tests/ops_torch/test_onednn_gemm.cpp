// onednn_bf16_mm (model/onednn_gemm.hpp) against LibTorch's own bf16 products: bitwise at::mm, and
// with a bias bitwise the bias rows followed by addmm_ (what fused_linear ran before), on the shapes
// of ar-vit-tiny's linear layers and their backward (row- and column-major operands), on one and two
// threads; and the products it must hand back to LibTorch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <tuple>
#include <vector>

#include "ops/torch/onednn_gemm.hpp"

namespace arcal {
namespace {

struct ThreadsGuard {
  int saved = at::get_num_threads();
  ~ThreadsGuard() { at::set_num_threads(saved); }
};

TEST(OnednnGemm, IsLibTorchsProductBitForBit) {
  if (!onednn_bf16_gemm_available()) GTEST_SKIP() << "no oneDNN path here (built without it, or no AVX-512)";
  ThreadsGuard guard;
  // (rows, in, out): a batch of 128 x 17 tokens through qkv, proj, fc1, fc2, the head on 128 first
  // tokens, a last batch of 7 images, and the patch embedding's 16 inputs.
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> shapes{
      {2176, 64, 192}, {2176, 64, 64}, {2176, 64, 256}, {2176, 256, 64}, {128, 64, 10}, {119, 64, 256}, {2176, 16, 64}};
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    for (const auto& [R, I, O] : shapes) {
      SCOPED_TRACE(testing::Message() << "rows " << R << " in " << I << " out " << O << ", " << threads
                                      << " thread(s)");
      torch::manual_seed(R + I + O);
      const auto x = (torch::randn({R, I}) * 3).to(torch::kBFloat16), w = torch::randn({O, I}).to(torch::kBFloat16);
      const auto g = torch::randn({R, O}).to(torch::kBFloat16), bias = torch::randn({O}).to(torch::kBFloat16);
      // forward x w^T (w^T column-major), with the bias as fused_linear adds it without oneDNN
      auto rows = bias.unsqueeze(0).expand({R, O}).contiguous();
      rows.addmm_(x, w.t());
      const auto y = onednn_bf16_mm(x, w.t(), bias);
      ASSERT_TRUE(y.defined());
      EXPECT_TRUE(torch::equal(y, rows));
      EXPECT_TRUE(torch::equal(onednn_bf16_mm(x, w.t()), x.mm(w.t())));
      // backward: dx = g w (both row-major), dw = g^T x (g^T column-major)
      EXPECT_TRUE(torch::equal(onednn_bf16_mm(g, w), g.mm(w)));
      EXPECT_TRUE(torch::equal(onednn_bf16_mm(g.t(), x), g.t().mm(x)));
      // a row selection of a 3-d tensor (the first-token head's input): row stride 17 x 64
      const auto tokens = torch::randn({R, 17, I}).to(torch::kBFloat16);
      const auto first = tokens.select(1, 0);
      EXPECT_TRUE(torch::equal(onednn_bf16_mm(first, w.t()), first.mm(w.t())));
    }
  }
}

// Products LibTorch does not send to oneDNN, or that the primitive cannot read, come back undefined
// (the caller then runs LibTorch's operators): 16^3 multiply-adds or fewer (LibTorch's reference
// GEMM), float or mixed dtypes, a strided operand, mismatched shapes, a non-contiguous bias.
TEST(OnednnGemm, HandsBackWhatLibTorchDoesNotSendToOnednn) {
  const auto a = torch::randn({64, 64}).to(torch::kBFloat16), b = torch::randn({64, 32}).to(torch::kBFloat16);
  EXPECT_FALSE(onednn_bf16_mm(a.narrow(0, 0, 2), b).defined());  // 2 x 64 x 32 = 16^3 multiply-adds
  if (onednn_bf16_gemm_available()) {
    EXPECT_TRUE(onednn_bf16_mm(a.narrow(0, 0, 3), b).defined());
  }
  EXPECT_FALSE(onednn_bf16_mm(a.to(torch::kFloat), b.to(torch::kFloat)).defined());
  EXPECT_FALSE(onednn_bf16_mm(a, b.to(torch::kFloat)).defined());
  EXPECT_FALSE(onednn_bf16_mm(a.slice(1, 0, 64, 2), b.narrow(0, 0, 32)).defined());  // every other column
  EXPECT_FALSE(onednn_bf16_mm(a, b.narrow(0, 0, 32)).defined());
  const auto wide_bias = torch::randn({64}).to(torch::kBFloat16);
  EXPECT_FALSE(onednn_bf16_mm(a, b, wide_bias.slice(0, 0, 64, 2)).defined());
  EXPECT_FALSE(onednn_bf16_mm(a, b, wide_bias).defined());  // 64 entries for 32 columns
  if (onednn_bf16_gemm_available()) {
    EXPECT_TRUE(onednn_bf16_mm(a, b).defined());
  }
}

}  // namespace
}  // namespace arcal
