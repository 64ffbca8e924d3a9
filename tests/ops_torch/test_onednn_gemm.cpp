// onednn_bf16_mm (ops/torch/onednn_gemm.hpp) on the shapes of ar-vit-tiny's linear layers and their
// backward (row- and column-major operands, a row selection of a 3-d tensor), on one and two threads:
// each product within bf16 rounding of a float64 product of the same bf16 operands, as LibTorch's own
// bf16 product is; and the products it must hand back to LibTorch. (With LibTorch 1.13, which called
// Debian's oneDNN itself, the products were bitwise LibTorch's; PyTorch 2.x carries its own oneDNN 3.x,
// whose AMX kernels block some of these sums differently.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "ops/torch/onednn_gemm.hpp"

namespace arcal {
namespace {

struct ThreadsGuard {
  int saved = at::get_num_threads();
  ~ThreadsGuard() { at::set_num_threads(saved); }
};

// Whether the bf16 product `got` of a (M,K) and b (K,N), plus bias, is the float64 product of the same
// bf16 values within the rounding of its bf16 output (half a unit in the last place, 2^-9 relative) and
// of a float32 accumulation over K terms (K 2^-24 times the sum of the terms' magnitudes), with a
// factor 2 of slack. A transposed operand, a missing bias or a wrong row breaks it by orders of magnitude.
::testing::AssertionResult within_bf16_rounding(const torch::Tensor& got, const torch::Tensor& a,
                                                const torch::Tensor& b, const torch::Tensor& bias = {}) {
  if (!got.defined()) return ::testing::AssertionFailure() << "no product (handed back)";
  const auto ad = a.to(torch::kDouble), bd = b.to(torch::kDouble);
  auto ref = ad.mm(bd);
  auto mag = ad.abs().mm(bd.abs());
  if (bias.defined()) {
    ref += bias.to(torch::kDouble).unsqueeze(0);
    mag += bias.to(torch::kDouble).abs().unsqueeze(0);
  }
  const double K = double(a.size(1)) + 1;
  const auto bound = 2 * (ref.abs() * std::ldexp(1.0, -9) + mag * (K * std::ldexp(1.0, -24)));
  const auto excess = ((got.to(torch::kDouble) - ref).abs() - bound).max().item<double>();
  if (got.sizes() == ref.sizes() && excess <= 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "worst error above the bound by " << excess;
}

TEST(OnednnGemm, ProductsAreTheBf16OperandsProductWithinRounding) {
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
      // forward x w^T (w^T column-major), with and without the bias; LibTorch's own product meets the same
      // bound (the bound is not tighter than a correct bf16 product)
      EXPECT_TRUE(within_bf16_rounding(onednn_bf16_mm(x, w.t(), bias), x, w.t(), bias));
      EXPECT_TRUE(within_bf16_rounding(onednn_bf16_mm(x, w.t()), x, w.t()));
      EXPECT_TRUE(within_bf16_rounding(x.mm(w.t()), x, w.t()));
      // backward: dx = g w (both row-major), dw = g^T x (g^T column-major)
      EXPECT_TRUE(within_bf16_rounding(onednn_bf16_mm(g, w), g, w));
      EXPECT_TRUE(within_bf16_rounding(onednn_bf16_mm(g.t(), x), g.t(), x));
      // a row selection of a 3-d tensor (the first-token head's input): row stride 17 x 64. oneDNN 2.6
      // sent it to an implementation that failed to execute beside PyTorch 2.x's oneDNN (AMX CPU).
      const auto tokens = torch::randn({R, 17, I}).to(torch::kBFloat16);
      const auto first = tokens.select(1, 0);
      EXPECT_TRUE(within_bf16_rounding(onednn_bf16_mm(first, w.t(), bias), first, w.t(), bias));
      // the same product twice: the cached primitive gives the same bits
      EXPECT_TRUE(torch::equal(onednn_bf16_mm(first, w.t(), bias), onednn_bf16_mm(first, w.t(), bias)));
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
