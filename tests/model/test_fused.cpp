// The fused operators (model/fused.hpp: the routing bank's points, the attention, GELU, LayerNorm;
// model/layers.hpp: the patch embedding and the LayerNorm modules' dispatch)
// against LibTorch's autograd on the composite they replace: values and gradients in double (1e-12) and float (1e-6,
// relative to the largest entry), odd shapes and strided inputs, whole AR-ViT models with the fused operators on and
// off, results independent of the thread count, and the errors for inputs of the wrong shape or dtype.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.hpp"

#include "model/ar_vit.hpp"
#include "model/attnres.hpp"
#include "model/fused.hpp"
#include "model/layers.hpp"
#include "model/tensor_compare.hpp"

using namespace arcal;
using arcal::test::FusedGuard;
using arcal::test::max_rel;

namespace {

torch::Tensor composite_attention(const torch::Tensor& qkv, int heads, bool causal = false) {
  const auto B = qkv.size(0), T = qkv.size(1), D = qkv.size(2) / 3, hd = D / heads;
  auto x = qkv.reshape({B, T, 3, heads, hd}).permute({2, 0, 3, 1, 4});
  auto q = x[0], k = x[1], v = x[2];
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(hd));
  if (causal)
    scores = scores.masked_fill(torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool)).triu(1),
                                -std::numeric_limits<double>::infinity());
  auto att = torch::softmax(scores, -1);
  return torch::matmul(att, v).transpose(1, 2).reshape({B, T, D});
}

void check_attention(torch::Dtype dtype, int B, int T, int D, int heads, double tol, bool causal = false) {
  torch::manual_seed(B * 100 + T);
  const auto opt = torch::TensorOptions().dtype(dtype);
  auto x = torch::randn({B, T, 3 * D}, opt) * 2.0;
  auto g = torch::randn({B, T, D}, opt);
  std::vector<torch::Tensor> outs, grads;
  for (int f = 0; f < 2; ++f) {
    auto qkv = x.clone().requires_grad_(true);
    auto o = f == 0 ? fused_self_attention(qkv, heads, causal) : composite_attention(qkv, heads, causal);
    (o * g).sum().backward();
    outs.push_back(o.detach());
    grads.push_back(qkv.grad());
  }
  EXPECT_LE(max_rel(outs[0], outs[1]), tol) << "B=" << B << " T=" << T << " D=" << D << " H=" << heads;
  EXPECT_LE(max_rel(grads[0], grads[1]), tol) << "B=" << B << " T=" << T << " D=" << D << " H=" << heads;
}

// A chain of routing points over shared sources, as attnres_stack runs them: sources read by several
// points (their gradients meet in the bank), a source that is itself computed from two others (the
// tap hands its gradient on), and a source also used outside the routing. The composite is the
// unfused formula: alpha = softmax_s(rms_normalise(v_s) . u), h = sum_s alpha_s v_s.
struct BankCase {
  std::vector<torch::Tensor> outputs, grads;  // h of each point and alpha; d source, d U
};

BankCase run_bank_case(torch::Dtype dtype, std::int64_t d, bool fused, int backward_passes = 1) {
  torch::manual_seed(21);
  const auto opt = torch::TensorOptions().dtype(dtype);
  const double eps = 1e-6;
  std::vector<torch::Tensor> leaves;
  for (int s = 0; s < 3; ++s) leaves.push_back((torch::randn({3, 5, d}, opt) * (1.0 + s)).requires_grad_(true));
  auto U = (torch::randn({4, d}, opt) * 0.7).requires_grad_(true);
  const auto w = torch::randn({4, 3, 5, d}, opt);
  const auto outside = torch::randn({3, 5, d}, opt);
  const std::vector<std::vector<int>> points{{0}, {0, 1}, {0, 1, 2, 3}, {1, 3}};
  BankCase r;
  auto derived = leaves[1] * 0.5 + leaves[2].pow(2);  // source 3, not a leaf
  const std::vector<torch::Tensor> sources{leaves[0], leaves[1], leaves[2], derived};
  torch::Tensor loss = (sources[1] * outside).sum();
  RoutingBank bank;
  if (fused)
    for (const auto& s : sources) bank.add(s);
  for (std::size_t p = 0; p < points.size(); ++p) {
    torch::Tensor h, alpha;
    if (fused) {
      std::tie(h, alpha) = bank.route(U[std::int64_t(p)], points[p], eps);
    } else {
      std::vector<torch::Tensor> scores, values;
      for (int s : points[p]) {
        scores.push_back(torch::matmul(rms_normalise(sources[std::size_t(s)], eps), U[std::int64_t(p)]));
        values.push_back(sources[std::size_t(s)]);
      }
      alpha = torch::softmax(torch::stack(scores, 0), 0);
      h = (alpha.unsqueeze(-1) * torch::stack(values, 0)).sum(0);
    }
    loss = loss + (h * w[std::int64_t(p)]).sum();
    r.outputs.push_back(h.detach());
    r.outputs.push_back(alpha.detach());
  }
  for (int pass = 0; pass < backward_passes; ++pass) loss.backward({}, /*retain_graph=*/pass + 1 < backward_passes);
  for (auto& l : leaves) r.grads.push_back(l.grad());
  r.grads.push_back(U.grad());
  return r;
}

void check_bank(torch::Dtype dtype, std::int64_t d, double tol) {
  const auto f = run_bank_case(dtype, d, true), c = run_bank_case(dtype, d, false);
  for (std::size_t i = 0; i < f.outputs.size(); ++i)
    EXPECT_LE(max_rel(f.outputs[i], c.outputs[i]), tol) << "d=" << d << " output " << i;
  for (std::size_t i = 0; i < f.grads.size(); ++i)
    EXPECT_LE(max_rel(f.grads[i], c.grads[i]), tol) << "d=" << d << " gradient " << i;
}

}  // namespace

TEST(Fused, RoutingBankMatchesAutogradInDouble) {
  for (std::int64_t d : {64, 128, 7}) check_bank(torch::kDouble, d, 1e-12);  // compiled widths and a generic one
}

TEST(Fused, RoutingBankMatchesAutogradInFloat) {
  // 15 rows: one batch of 8 rows summed by lanes (d a multiple of 16) and 7 rows one at a time.
  for (std::int64_t d : {64, 128, 48, 5}) check_bank(torch::kFloat, d, 1e-5);
}

// The bank's buffers are handed on and cleared by the taps: a second backward over a retained graph
// adds the same gradients again.
// Under bf16 autocast the bank takes the sublayers' bf16 outputs as they are, beside float sources:
// bitwise the bank over their widened float copies (outputs, alpha, the query's gradient, and each
// source's gradient, a bf16 one rounded once).
TEST(Fused, RoutingBankWithBFloat16SourcesIsTheBankOnTheirWidenedCopies) {
  for (std::int64_t d : {64, 24}) {  // a preset width and a generic one
    torch::manual_seed(17);
    std::vector<torch::Tensor> base;
    for (int s = 0; s < 5; ++s) {
      auto v = torch::randn({3, 17, d}) * (1 + s);
      base.push_back(s % 2 == 0 ? v.to(torch::kBFloat16) : v);  // sources 0, 2, 4 in bf16
    }
    const auto u0 = torch::randn({d}), g = torch::randn({3, 17, d});
    std::vector<torch::Tensor> res;
    for (bool widened : {false, true}) {
      std::vector<torch::Tensor> v;
      for (const auto& b : base) v.push_back(b.clone().requires_grad_(true));
      auto u = u0.clone().requires_grad_(true);
      RoutingBank bank;
      for (const auto& t : v) bank.add(widened ? t.to(torch::kFloat) : t);
      auto [h1, a1] = bank.route(u, {0, 1, 2, 3, 4}, 1e-6);
      auto [h2, a2] = bank.route(u * 0.5, {2, 3, 0}, 1e-6);
      EXPECT_EQ(h1.scalar_type(), torch::kFloat);
      ((h1 + h2) * g).sum().backward();
      std::vector<torch::Tensor> parts{h1.detach().flatten(), h2.detach().flatten(), a1.flatten(), a2.flatten(),
                                       u.grad().flatten()};
      for (const auto& t : v) {
        EXPECT_EQ(t.grad().scalar_type(), t.scalar_type());
        parts.push_back(t.grad().to(torch::kFloat).flatten());
      }
      res.push_back(torch::cat(parts));
    }
    // Bitwise with LibTorch 1.13. LibTorch 2's autograd sums the two routing points' contributions (and
    // converts the bf16 sources' gradients) in another order in the two set-ups, so they agree to float
    // rounding: the largest difference 1.5e-5 on u's gradient, a sum over 3 x 17 x 2 rows.
    const double scale = res[1].abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(res[0], res[1], 1e-5, 1e-6 * scale))
        << "d = " << d << ": max |diff| " << (res[0] - res[1]).abs().max().item<double>() << " of " << scale;
  }
}

// A source's r = (mean v^2 + eps)^(-1/2) is computed by the first point that reads it and reused by
// the later points of the same bank (they sum v.u alone): a point's output, alpha and every gradient
// are bitwise those of the same point in a bank where no earlier point read its sources, in float
// (d = 64: rows by eight, and a 7-row tail), with bf16 sources, and in double; with the sources in
// another order than the one that computed r, and a point with another eps (which must not reuse it).
TEST(Fused, RoutingPointsReuseASourcesNormBitForBit) {
  for (const auto& [dtype, half] : std::vector<std::pair<torch::Dtype, bool>>{
           {torch::kFloat, false}, {torch::kFloat, true}, {torch::kDouble, false}}) {
    torch::manual_seed(23);
    const auto opt = torch::TensorOptions().dtype(dtype);
    std::vector<torch::Tensor> base;
    for (int s = 0; s < 3; ++s) {
      auto v = torch::randn({3, 5, 64}, opt) * (1 + s);
      base.push_back(half && s != 1 ? v.to(torch::kBFloat16) : v);
    }
    const auto u1 = torch::randn({64}, opt), u2 = torch::randn({64}, opt), g = torch::randn({3, 5, 64}, opt);
    std::vector<torch::Tensor> res;
    for (bool earlier : {true, false}) {
      std::vector<torch::Tensor> v;
      for (const auto& b : base) v.push_back(b.clone().requires_grad_(true));
      auto u = u2.clone().requires_grad_(true);
      RoutingBank bank;
      for (const auto& t : v) bank.add(t);
      torch::Tensor loss = torch::zeros({}, opt);
      if (earlier) {  // computes r of sources 2 and 0 (eps 1e-6), and of 1 with another eps
        auto [h0, a0] = bank.route(u1, {2, 0}, 1e-6);
        auto [hx, ax] = bank.route(u1, {1}, 1e-3);
        loss = loss + (h0 * g).sum() * 0 + (hx * g).sum() * 0;  // in the graph, contributing nothing
      }
      auto [h, a] = bank.route(u, {0, 1, 2}, 1e-6);
      (loss + (h * g).sum()).backward();
      std::vector<torch::Tensor> parts{h.detach().flatten(), a.flatten(), u.grad().flatten()};
      for (const auto& t : v) parts.push_back(t.grad().to(dtype).flatten());
      res.push_back(torch::cat(parts));
    }
    EXPECT_TRUE(torch::equal(res[0], res[1])) << dtype << (half ? " with bf16 sources" : "");
  }
}

TEST(Fused, RoutingBankBackwardTwiceOverARetainedGraph) {
  const auto once = run_bank_case(torch::kDouble, 64, true, 1), twice = run_bank_case(torch::kDouble, 64, true, 2);
  for (std::size_t i = 0; i < once.grads.size(); ++i)
    EXPECT_LE(max_rel(twice.grads[i], 2.0 * once.grads[i]), 1e-12) << "gradient " << i;
}

// The GELU against LibTorch's exact (erf) gelu and its autograd, over the whole range a
// pre-activation takes, the far tails included (where Phi is tiny and relative accuracy matters).
void check_gelu(torch::Dtype dtype, double tol) {
  const auto opt = torch::TensorOptions().dtype(dtype);
  auto x0 = torch::cat({torch::linspace(-12.0, 12.0, 4801, opt), torch::randn({3, 7, 130}, opt).flatten() * 3.0});
  auto g = torch::randn(x0.sizes(), opt);
  std::vector<torch::Tensor> outs, grads;
  for (int f = 0; f < 2; ++f) {
    auto x = x0.clone().requires_grad_(true);
    auto y = f == 0 ? fused_gelu(x) : torch::gelu(x);
    (y * g).sum().backward();
    outs.push_back(y.detach());
    grads.push_back(x.grad());
  }
  EXPECT_LE(max_rel(outs[0], outs[1]), tol);
  EXPECT_LE(max_rel(grads[0], grads[1]), tol);
  // Elementwise, relative to each entry, against 0.5 x erfc(-x / sqrt 2) in double (LibTorch's
  // 0.5 x (1 + erf(x / sqrt 2)) cancels in the far negative tail, so it is no reference there): the
  // float fit keeps its accuracy where gelu is tiny.
  const auto xd = x0.to(torch::kDouble);
  const auto ref = 0.5 * xd * torch::erfc(-xd / std::sqrt(2.0));
  // In float the tail's exp(-x^2/2) inherits the rounding of x^2 (relative x^2 * 2^-24), so past
  // |x| = 5, where gelu is below 1.5e-6, the bound is 3e-5.
  const auto rel = (outs[0].to(torch::kDouble) - ref).abs() / ref.abs().clamp_min(1e-300);
  const auto core = (ref.abs() > 1e-30) & (xd.abs() <= 5.0), tail = (ref.abs() > 1e-30) & (xd.abs() > 5.0);
  EXPECT_LE(rel.masked_select(core).max().item<double>(), dtype == torch::kDouble ? 1e-13 : 2e-6);
  EXPECT_LE(rel.masked_select(tail).max().item<double>(), dtype == torch::kDouble ? 1e-13 : 3e-5);
}

TEST(Fused, GeluMatchesLibTorchInDouble) { check_gelu(torch::kDouble, 1e-13); }
TEST(Fused, GeluMatchesLibTorchInFloat) { check_gelu(torch::kFloat, 1e-6); }

TEST(Fused, GeluOfANonContiguousTensor) {
  auto x = torch::randn({6, 10}, torch::kDouble).t();  // (10, 6), transposed strides
  EXPECT_LE(max_rel(fused_gelu(x), torch::gelu(x)), 1e-13);
  EXPECT_THROW(fused_gelu(torch::randn({4}).to(torch::kHalf)), InputError);
  EXPECT_THROW(fused_gelu(torch::arange(4)), InputError);
}

// Distance in bf16 units in the last place between two bf16 tensors of finite values (the bit
// patterns as sign-magnitude integers, mapped onto one monotone integer line).
std::int64_t max_bf16_ulps(const torch::Tensor& a, const torch::Tensor& b) {
  auto ordered = [](const torch::Tensor& t) {
    auto u = t.contiguous().view(torch::kShort).to(torch::kLong).bitwise_and(0xffff);
    return torch::where(u.ge(0x8000), 0x8000 - u, u);  // -0 and +0 both 0
  };
  return (ordered(a) - ordered(b)).abs().max().item<std::int64_t>();
}

// bf16 (the MLP under autocast). The reference is LibTorch's float gelu and its gradient on the
// widened inputs, rounded to bf16: our values within 1 ulp of it (both round a float result to
// nearest; the fit's 2e-7 can move a value across a rounding boundary), the input gradient within
// 2 ulps (gelu' is kept in bf16: a second rounding), for x in [-3, 9] (below -3 LibTorch's
// 1 + erf loses more than 1e-4 of its relative accuracy to cancellation even in float). LibTorch's own bf16 gelu is no
// reference: it cancels from about x = -3 on (gelu(-3.14) = -0.0 there). Everywhere, against 0.5 x erfc(-x / sqrt 2) in
// double: within bf16's half ulp (2^-8 relative) and the fit's tail error.
TEST(Fused, GeluMatchesLibTorchInBFloat16) {
  auto xf = torch::cat({torch::linspace(-9.0, 9.0, 20001), torch::randn({2176 * 13}) * 3.0});
  auto x0 = xf.to(torch::kBFloat16);
  auto g = torch::randn(x0.sizes()).to(torch::kBFloat16);
  auto x = x0.clone().requires_grad_(true);
  auto y = fused_gelu(x);
  ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
  y.backward(g);
  ASSERT_EQ(x.grad().scalar_type(), torch::kBFloat16);
  auto xr = x0.to(torch::kFloat).requires_grad_(true);
  auto yr = torch::gelu(xr);
  yr.backward(g.to(torch::kFloat));
  const auto bulk = x0.to(torch::kFloat).ge(-3.0);
  EXPECT_LE(max_bf16_ulps(y.detach().masked_select(bulk), yr.detach().to(torch::kBFloat16).masked_select(bulk)), 1);
  EXPECT_LE(max_bf16_ulps(x.grad().masked_select(bulk), xr.grad().to(torch::kBFloat16).masked_select(bulk)), 2);
  const auto xd = x0.to(torch::kDouble);
  const auto ref = 0.5 * xd * torch::erfc(-xd / std::sqrt(2.0));
  const auto live = ref.abs() > 1e-30;
  const auto rel = ((y.detach().to(torch::kDouble) - ref).abs() / ref.abs().clamp_min(1e-300)).masked_select(live);
  EXPECT_LE(rel.max().item<double>(), std::ldexp(1.0, -8) * 1.001 + 3e-5);
  const auto outs = std::vector<torch::Tensor>{y.detach()};
  {  // without autograd: the same values
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(fused_gelu(x0), outs[0]));
  }
  // Rounding to bf16: NaN stays NaN, infinities stay, overflow rounds to infinity, ties go to even.
  auto special = torch::tensor({std::nanf(""), INFINITY, -INFINITY, 3.3e38f, 0.0f}).to(torch::kBFloat16);
  auto ys = fused_gelu(special).to(torch::kFloat);
  EXPECT_TRUE(std::isnan(ys[0].item<float>()));
  EXPECT_EQ(ys[1].item<float>(), INFINITY);
  EXPECT_EQ(ys[3].item<float>(), torch::gelu(special[3]).to(torch::kFloat).item<float>());
  EXPECT_EQ(ys[4].item<float>(), 0.0f);
}

// bf16 GELU comes from a table of the float kernel's results: for each of the 65536 bf16 inputs the
// value and (through a unit output gradient) gelu'(x) are the float operator's on the widened input,
// rounded to bf16; with and without autograd; NaN inputs give NaN.
TEST(Fused, GeluInBFloat16IsTheFloatKernelRoundedForEveryInput) {
  const auto bits = torch::arange(0, 1 << 16, torch::kInt32).to(torch::kInt16);
  const auto x16 = bits.view(torch::kBFloat16);
  auto x = x16.clone().requires_grad_(true);
  auto y = fused_gelu(x);
  y.backward(torch::ones_like(x16));
  auto xf = x16.to(torch::kFloat).requires_grad_(true);
  auto yf = fused_gelu(xf);
  yf.backward(torch::ones_like(xf));
  const auto nan = torch::isnan(xf.detach()) | torch::isnan(yf.detach());
  EXPECT_TRUE(torch::isnan(y.detach().to(torch::kFloat)).equal(nan));
  const auto live = nan.logical_not();
  EXPECT_TRUE(torch::equal(y.detach().masked_select(live), yf.detach().to(torch::kBFloat16).masked_select(live)));
  const auto dlive = live & torch::isfinite(xf.grad());
  EXPECT_TRUE(torch::equal(x.grad().masked_select(dlive), xf.grad().to(torch::kBFloat16).masked_select(dlive)));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(fused_gelu(x16).masked_select(live), y.detach().masked_select(live)));
}

// Without autograd the forward pass writes the values only; with it, it also writes gelu'(x) for
// the backward. Both must give the same values, and a graph kept for a second backward must give
// the same gradient twice.
TEST(Fused, GeluWithAndWithoutAutogradAgree) {
  for (auto dtype : {torch::kFloat, torch::kDouble}) {
    auto x = (torch::randn({2176, 37}, torch::TensorOptions().dtype(dtype)) * 2.0).requires_grad_(true);
    torch::Tensor plain;
    {
      torch::NoGradGuard no_grad;
      plain = fused_gelu(x);
    }
    auto y = fused_gelu(x);
    ASSERT_TRUE(y.requires_grad());
    EXPECT_TRUE(torch::equal(plain, y.detach()));
    EXPECT_TRUE(torch::equal(fused_gelu(x.detach()), plain));
    auto g = torch::randn(x.sizes(), x.options().requires_grad(false));
    auto first = torch::autograd::grad({y}, {x}, {g}, /*retain_graph=*/true)[0];
    auto second = torch::autograd::grad({y}, {x}, {g})[0];
    EXPECT_TRUE(torch::equal(first, second));
    auto xr = x.detach().clone().requires_grad_(true);
    auto ref = torch::autograd::grad({torch::gelu(xr)}, {xr}, {g})[0];
    EXPECT_LE(max_rel(first, ref), dtype == torch::kDouble ? 1e-13 : 1e-6);
  }
}

// LayerNorm against torch::layer_norm's autograd: values and the gradients of x, weight and bias,
// for widths that are and are not whole vectors, a strided input, more rows than one block, and a
// non-default eps.
void check_layer_norm(torch::Dtype dtype, double tol) {
  const auto opt = torch::TensorOptions().dtype(dtype);
  struct Case {
    std::vector<std::int64_t> shape;
    double eps;
    bool strided;
  };
  // Float rows go 8 at a time when d is a multiple of 16, the rest one at a time: 21 rows at d = 64,
  // 300 at 48 and 37 at 128 take both paths; d = 24, 13 and 3 the one-row path only.
  for (const auto& c : std::vector<Case>{{{3, 7, 64}, 1e-6, false},
                                         {{5, 13}, 1e-5, false},
                                         {{300, 24}, 1e-6, true},
                                         {{2, 3}, 1e-3, false},
                                         {{300, 48}, 1e-6, false},
                                         {{37, 128}, 1e-6, true}}) {
    torch::manual_seed(11);
    const auto d = c.shape.back();
    auto x0 = torch::randn(c.shape, opt) * 3.0 + 0.5;
    if (c.strided) x0 = torch::randn({d, c.shape[0]}, opt).t();  // (rows, d), column-major
    const auto w0 = torch::randn({d}, opt), b0 = torch::randn({d}, opt);
    const auto g = torch::randn(x0.sizes(), opt);
    std::vector<std::vector<torch::Tensor>> res;
    for (int f = 0; f < 2; ++f) {
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true),
           b = b0.clone().requires_grad_(true);
      auto xin = c.strided ? x0.t().clone().t().requires_grad_(true) : x;
      auto y = f == 0 ? fused_layer_norm(xin, w, b, c.eps) : torch::layer_norm(xin, {d}, w, b, c.eps);
      (y * g).sum().backward();
      res.push_back({y.detach(), xin.grad(), w.grad(), b.grad()});
    }
    const char* names[] = {"y", "dx", "dweight", "dbias"};
    for (int i = 0; i < 4; ++i)
      EXPECT_LE(max_rel(res[0][i], res[1][i]), tol) << names[i] << " at d = " << d << ", eps " << c.eps;
  }
  // d = 1: every row is its own mean, so y = bias and the gradients of x and weight vanish.
  auto x = torch::randn({6, 1}, opt).requires_grad_(true), w = torch::randn({1}, opt).requires_grad_(true);
  const auto b = torch::randn({1}, opt);
  auto y = fused_layer_norm(x, w, b, 1e-5);
  y.sum().backward();
  EXPECT_TRUE(torch::equal(y.detach(), b.expand({6, 1})));
  EXPECT_EQ(x.grad().abs().max().item<double>(), 0.0);
  EXPECT_EQ(w.grad().abs().max().item<double>(), 0.0);
}

TEST(Fused, LayerNormMatchesLibTorchInDouble) { check_layer_norm(torch::kDouble, 1e-12); }
TEST(Fused, LayerNormMatchesLibTorchInFloat) { check_layer_norm(torch::kFloat, 1e-5); }

// A norm before a linear under bf16 autocast writes bf16 and reads the linear's bf16 gradient: bitwise
// the float norm followed by .to(bf16), with the gradient widened, for every parameter; through the
// module helper only under CPU bf16 autocast.
TEST(Fused, LayerNormWithABFloat16OutputIsTheFloatNormRounded) {
  for (const auto& shape : std::vector<std::vector<std::int64_t>>{{11, 17, 64}, {5, 13}, {300, 24}}) {
    torch::manual_seed(13);
    const auto d = shape.back();
    const auto x0 = torch::randn(shape) * 3.0 + 0.5, w0 = torch::randn({d}), b0 = torch::randn({d});
    const auto g16 = torch::randn(shape).to(torch::kBFloat16);
    std::vector<std::vector<torch::Tensor>> res;
    for (bool bf16 : {true, false}) {
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true),
           b = b0.clone().requires_grad_(true);
      auto y = fused_layer_norm(x, w, b, 1e-6, bf16);
      EXPECT_EQ(y.scalar_type(), bf16 ? torch::kBFloat16 : torch::kFloat);
      if (bf16)
        y.backward(g16);
      else
        y.backward(g16.to(torch::kFloat));
      res.push_back({y.detach().to(torch::kBFloat16), x.grad(), w.grad(), b.grad()});
    }
    const char* names[] = {"y", "dx", "dweight", "dbias"};
    // Bitwise with LibTorch 1.13; LibTorch 2's autograd hands the float path's gradient over through
    // another sequence of ops, and dx moved by one float ulp (6e-8 of 2.8 at d = 64): float rounding.
    for (int i = 0; i < 4; ++i) {
      const double diff = (res[0][i].to(torch::kDouble) - res[1][i].to(torch::kDouble)).abs().max().item<double>();
      const double scale = res[1][i].to(torch::kDouble).abs().max().item<double>();
      EXPECT_LE(diff, 4 * std::ldexp(scale, -23))
          << names[i] << " at d = " << d << ": max |diff| " << diff << " of " << scale;
    }
  }
  EXPECT_THROW(fused_layer_norm(torch::randn({2, 4}, torch::kDouble), torch::ones({4}, torch::kDouble),
                                torch::zeros({4}, torch::kDouble), 1e-6, true),
               InputError);  // bf16 output for a float x only
  FusedGuard guard;
  set_fused_operators(true);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({16}).eps(1e-6));
  const auto x = torch::randn({4, 5, 16});
  EXPECT_EQ(layer_norm_before_linear(norm, x).scalar_type(), torch::kFloat);  // no autocast
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto under = layer_norm_before_linear(norm, x), plain = layer_norm_fp32(norm, x);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  EXPECT_EQ(under.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(plain.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(under, plain.to(torch::kBFloat16)));
}

TEST(Fused, LayerNormModuleDispatch) {
  FusedGuard guard;
  torch::manual_seed(12);
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({16}).eps(1e-6));
  norm->weight.data().normal_();
  norm->bias.data().normal_();
  const auto x = torch::randn({4, 5, 16});
  set_fused_operators(true);
  const auto fused = layer_norm_fp32(norm, x);
  set_fused_operators(false);
  const auto composite = layer_norm_fp32(norm, x);
  EXPECT_LE(max_rel(fused, composite), 1e-6);
  // bf16 activations are normalised in fp32 on both paths.
  set_fused_operators(true);
  EXPECT_EQ(layer_norm_fp32(norm, x.to(torch::kBFloat16)).scalar_type(), torch::kFloat);
  // Without an affine transform the module's own forward runs.
  torch::nn::LayerNorm plain(torch::nn::LayerNormOptions({16}).elementwise_affine(false));
  EXPECT_LE(max_rel(layer_norm_fp32(plain, x), torch::layer_norm(x, {16})), 1e-6);
}

// The patch embedding as one matrix product against LibTorch's strided conv: tokens, and the
// gradients of the weight and bias (the images need none), for the ViT's and Swin's geometries; with
// tiles that do not divide the image, or the fused operators off, the conv itself runs.
TEST(Fused, PatchEmbeddingMatchesTheConv) {
  FusedGuard guard;
  struct Case {
    int C, H, W, p, d;
  };
  for (auto dtype : {torch::kDouble, torch::kFloat}) {
    for (const auto& c :
         {Case{1, 28, 28, 7, 64}, Case{3, 32, 32, 4, 96}, Case{2, 12, 8, 4, 5}, Case{1, 30, 30, 7, 8}}) {
      torch::manual_seed(3);
      torch::nn::Conv2d conv(torch::nn::Conv2dOptions(c.C, c.d, c.p).stride(c.p));
      conv->to(dtype);
      auto images = torch::randn({5, c.C, c.H, c.W}, torch::TensorOptions().dtype(dtype));
      auto g = torch::randn({5, (c.H / c.p) * (c.W / c.p), c.d}, images.options());
      std::vector<torch::Tensor> outs, dw, db;
      for (bool fused : {true, false}) {
        set_fused_operators(fused);
        conv->zero_grad();
        auto tokens = fused ? patch_embed_tokens(conv, images) : conv->forward(images).flatten(2).transpose(1, 2);
        ASSERT_EQ(tokens.sizes(), g.sizes());
        (tokens * g).sum().backward();
        outs.push_back(tokens.detach());
        dw.push_back(conv->weight.grad().clone());
        db.push_back(conv->bias.grad().clone());
      }
      const double tol = dtype == torch::kDouble ? 1e-12 : 1e-5;
      EXPECT_LE(max_rel(outs[0], outs[1]), tol) << c.C << "x" << c.H << "x" << c.W << " p " << c.p;
      EXPECT_LE(max_rel(dw[0], dw[1]), tol);
      EXPECT_LE(max_rel(db[0], db[1]), tol);
    }
  }
  set_fused_operators(true);
  torch::nn::Conv2d padded(torch::nn::Conv2dOptions(1, 4, 4).stride(4).padding(1));
  auto images = torch::randn({2, 1, 8, 8});
  EXPECT_TRUE(torch::equal(patch_embed_tokens(padded, images), padded->forward(images).flatten(2).transpose(1, 2)));
}

// fused_linear runs the GEMMs and sums LibTorch's addmm and its backward run, so output and every
// gradient are bitwise torch::linear's: float and double, 2-d (a strided row selection as the
// first-token head reads it) and 3-d inputs, with and without bf16 autocast (float or bf16 input,
// float parameters), with and without autograd. Inputs at::linear treats otherwise (a strided 3-d
// input, no bias) are handed to it.
TEST(Fused, LinearIsTorchLinearBitForBit) {
  FusedGuard guard;
  set_fused_operators(true);
  struct Case {
    std::vector<std::int64_t> shape;
    bool select_row, transpose, autocast, bf16_input, bias;
    torch::Dtype dtype;
  };
  const std::vector<Case> cases = {
      {{128, 17, 64}, false, false, false, false, true, torch::kFloat},
      {{33, 17, 24}, false, false, false, false, true, torch::kDouble},
      {{50, 64}, false, false, false, false, true, torch::kFloat},
      {{16, 17, 64}, true, false, false, false, true, torch::kFloat},
      {{128, 17, 64}, false, false, true, false, true, torch::kFloat},
      {{128, 17, 64}, false, false, true, true, true, torch::kFloat},
      {{16, 17, 64}, true, false, true, false, true, torch::kFloat},
      {{9, 64, 17}, false, true, false, false, true, torch::kFloat},
      {{9, 17, 64}, false, false, false, false, false, torch::kFloat},
  };
  for (const auto& c : cases) {
    torch::manual_seed(5);
    const auto opt = torch::TensorOptions().dtype(c.dtype);
    const auto x0 = torch::randn(c.shape, opt) * 2.0;
    const auto K = c.transpose ? c.shape[1] : c.shape.back();
    const auto w0 = torch::randn({96, K}, opt) * 0.2, b0 = torch::randn({96}, opt);
    std::vector<std::vector<torch::Tensor>> res;
    for (bool fused : {true, false}) {
      auto x = (c.bf16_input ? x0.to(torch::kBFloat16) : x0.clone()).requires_grad_(true);
      auto w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
      auto in = c.select_row ? x.select(1, 3) : c.transpose ? x.transpose(1, 2) : x;
      if (c.autocast) {
        at::autocast::set_autocast_enabled(at::kCPU, true);
        at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
      }
      const auto bias = c.bias ? b : torch::Tensor();
      auto y = fused ? fused_linear(in, w, bias) : torch::linear(in, w, bias);
      if (fused) {  // the operator ran (its node is y's, or under the 3-d view's)
        const auto node = y.grad_fn()->name().find("ViewBackward") == std::string::npos
                              ? y.grad_fn()->name()
                              : y.grad_fn()->next_edges()[0].function->name();
        EXPECT_EQ(node.find("LinearFunction") != std::string::npos, c.bias && !c.transpose) << node;
      }
      torch::Tensor y_nograd;
      {
        torch::NoGradGuard no_grad;
        y_nograd = fused ? fused_linear(in, w, bias) : torch::linear(in, w, bias);
      }
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
      torch::manual_seed(7);
      y.backward(torch::randn(y.sizes()).to(y.scalar_type()));
      res.push_back({y.detach(), y_nograd, x.grad(), w.grad(), c.bias ? b.grad() : torch::zeros({1})});
    }
    const char* names[] = {"y", "y without autograd", "dx", "dweight", "dbias"};
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(res[0][i].scalar_type(), res[1][i].scalar_type()) << names[i];
      EXPECT_TRUE(torch::equal(res[0][i], res[1][i]))
          << names[i] << " of " << c.shape << (c.autocast ? " autocast" : "");
    }
  }
}

TEST(Fused, AttentionMatchesAutogradInDouble) {
  check_attention(torch::kDouble, 3, 17, 64, 4, 1e-12);   // AR-ViT-tiny's shape
  check_attention(torch::kDouble, 11, 17, 64, 4, 1e-12);  // two groups of 8 images, the second partly filled
  check_attention(torch::kDouble, 2, 5, 12, 3, 1e-12);    // hd = 4, odd token count
  check_attention(torch::kDouble, 1, 1, 8, 2, 1e-12);     // one token: weights exactly 1
  check_attention(torch::kDouble, 2, 9, 128, 2, 1e-12);   // hd = 64
  check_attention(torch::kDouble, 2, 7, 96, 3, 1e-12);    // hd = 32
}

TEST(Fused, AttentionMatchesAutogradInFloat) {
  check_attention(torch::kFloat, 4, 17, 64, 4, 1e-6);
  // The lane path's vector transposes (float, hd a multiple of 8): two groups of 8 images with the
  // second partly filled, hd = 16 and 32, causal too; hd = 4 takes the element loops.
  check_attention(torch::kFloat, 11, 17, 64, 4, 1e-6);
  check_attention(torch::kFloat, 11, 17, 64, 4, 1e-6, true);
  check_attention(torch::kFloat, 9, 7, 96, 3, 1e-6);
  check_attention(torch::kFloat, 2, 9, 128, 2, 1e-6);  // hd = 64
  check_attention(torch::kFloat, 3, 5, 12, 3, 1e-6);
  check_attention(torch::kFloat, 2, 50, 96, 3, 1e-6);  // hd = 32, a longer sequence
}

TEST(Fused, CausalAttentionMatchesTheMaskedComposite) {
  check_attention(torch::kDouble, 3, 17, 64, 4, 1e-12, true);
  check_attention(torch::kDouble, 2, 33, 128, 4, 1e-12, true);  // hd = 32
  check_attention(torch::kDouble, 2, 6, 12, 3, 1e-12, true);    // generic hd = 4
  check_attention(torch::kFloat, 4, 64, 128, 4, 1e-6, true);
}

TEST(Fused, AttentionOfANonContiguousProjection) {
  torch::manual_seed(3);
  auto wide = torch::randn({2, 6, 2 * 3 * 8}, torch::kDouble);
  auto qkv = wide.slice(2, 0, 48, 2);  // (2,6,24), stride 2 on the last axis
  EXPECT_LE(max_rel(fused_self_attention(qkv, 2), composite_attention(qkv, 2)), 1e-12);
}

// Under bf16 autocast the operator reads the bf16 projection and writes bf16: bitwise the float
// operator on the widened qkv with its output and qkv's gradient rounded to bf16 (what the conversions
// around it gave), on the lane path and, through those conversions, beyond it (T = 50).
TEST(Fused, AttentionInBFloat16IsTheFloatOperatorRounded) {
  struct Case {
    std::int64_t B, T, D, H;
    bool causal;
  };
  for (const auto& c : {Case{11, 17, 64, 4, false}, Case{11, 17, 64, 4, true}, Case{3, 5, 12, 3, false},
                        Case{2, 7, 96, 3, true}, Case{2, 50, 96, 3, false}}) {
    torch::manual_seed(21);
    const auto qkv16 = (torch::randn({c.B, c.T, 3 * c.D}) * 2).to(torch::kBFloat16);
    const auto g16 = torch::randn({c.B, c.T, c.D}).to(torch::kBFloat16);
    auto a = qkv16.clone().requires_grad_(true);
    auto out16 = fused_self_attention(a, int(c.H), c.causal);
    out16.backward(g16);
    auto f = qkv16.to(torch::kFloat).requires_grad_(true);
    auto out32 = fused_self_attention(f, int(c.H), c.causal);
    out32.backward(g16.to(torch::kFloat));
    const std::string where = "B " + std::to_string(c.B) + " T " + std::to_string(c.T) + (c.causal ? " causal" : "");
    ASSERT_EQ(out16.scalar_type(), torch::kBFloat16) << where;
    ASSERT_EQ(a.grad().scalar_type(), torch::kBFloat16) << where;
    EXPECT_TRUE(torch::equal(out16, out32.detach().to(torch::kBFloat16))) << where;
    EXPECT_TRUE(torch::equal(a.grad(), f.grad().to(torch::kBFloat16))) << where;
    EXPECT_GT(out16.to(torch::kFloat).abs().max().item<double>(), 0.1) << where;  // not a zero output
  }
}

// The whole model, forward and every parameter's gradient, with the fused operators on and off.
TEST(Fused, ARViTLogitsAndGradientsMatchTheComposite) {
  FusedGuard guard;
  for (auto mode : {ResidualMode::Full, ResidualMode::Block, ResidualMode::Standard}) {
    auto cfg = make_model_config("ar-vit-tiny", 28, 1, 10, mode, 2);
    torch::manual_seed(5);
    ARViT m(cfg);
    {
      torch::NoGradGuard ng;
      auto params = m->named_parameters();
      if (params.contains("pseudo_query")) params["pseudo_query"].normal_(0.0, 0.5);
    }
    auto images = torch::randn({6, 1, 28, 28});
    auto labels = torch::randint(0, 10, {6}, torch::kLong);
    std::vector<torch::Tensor> logits;
    std::vector<std::vector<torch::Tensor>> grads;
    for (bool fused : {true, false}) {
      set_fused_operators(fused);
      m->zero_grad();
      auto out = m->forward(images);
      torch::nn::functional::cross_entropy(out, labels).backward();
      logits.push_back(out.detach());
      grads.emplace_back();
      for (auto& p : m->parameters()) grads.back().push_back(p.grad().clone());
    }
    EXPECT_LE(max_rel(logits[0], logits[1]), 1e-5) << to_string(mode);
    for (std::size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_LE(max_rel(grads[0][i], grads[1][i]), 1e-4) << to_string(mode) << " parameter " << i;
  }
}

// An ablation in the fused path is the softmax over the kept sources; the composite zeroes and
// renormalises. Both give the same logits, the same captured weights (0 on the dropped sources) and
// the same gradients; a point that drops every source gives h = 0 in both.
TEST(Fused, ARViTAblationMatchesTheComposite) {
  FusedGuard guard;
  auto cfg = make_model_config("ar-vit-tiny", 28, 1, 10, ResidualMode::Block, 2);
  torch::manual_seed(9);
  ARViT m(cfg);
  auto images = torch::randn({3, 1, 28, 28});
  RoutingAblation abl;
  abl.drop_sources.assign(13, {});
  abl.drop_sources[2] = {0};
  abl.drop_sources[5] = {1, 7};  // 7 is out of range at that point: ignored by both
  abl.drop_sources[12] = {0, 1, 2, 3, 4};
  for (int src = 0; src < m->config().sources_per_point()[4]; ++src)  // every source of point 4: no weight
    abl.drop_sources[4].push_back(src);
  std::vector<torch::Tensor> logits, grads;
  std::vector<RoutingCapture> caps(2);
  for (int f = 0; f < 2; ++f) {
    set_fused_operators(f == 0);
    m->zero_grad();
    auto out = m->forward(images, &caps[std::size_t(f)], &abl);
    out.sum().backward();
    logits.push_back(out.detach());
    grads.push_back(m->named_parameters()["pseudo_query"].grad().clone());
  }
  EXPECT_LE(max_rel(logits[0], logits[1]), 1e-5);
  EXPECT_LE(max_rel(grads[0], grads[1]), 1e-4);
  ASSERT_EQ(caps[0].alpha.size(), caps[1].alpha.size());
  for (std::size_t p = 0; p < caps[0].alpha.size(); ++p)
    EXPECT_LE((caps[0].alpha[p] - caps[1].alpha[p]).abs().max().item<double>(), 1e-6) << "point " << p;
  EXPECT_EQ(caps[0].alpha[4].abs().max().item<float>(), 0.0f);
  EXPECT_EQ(caps[0].alpha[2][0].abs().max().item<float>(), 0.0f);
}

TEST(Fused, ARViTUnderBf16AutocastStaysCloseToTheComposite) {
  FusedGuard guard;
  auto cfg = make_model_config("ar-vit-tiny", 28, 1, 10, ResidualMode::Full, 1);
  torch::manual_seed(6);
  ARViT m(cfg);
  auto images = torch::randn({4, 1, 28, 28});
  std::vector<torch::Tensor> logits;
  for (bool fused : {true, false}) {
    set_fused_operators(fused);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    auto out = m->forward(images).to(torch::kFloat).detach();
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
    logits.push_back(out);
  }
  // bf16 has 8 bits of mantissa; the fused attention runs in fp32, the composite's products in bf16.
  EXPECT_LE(max_rel(logits[0], logits[1]), 0.05);
}

TEST(Fused, ResultsDoNotDependOnTheThreadCount) {
  const int before = at::get_num_threads();
  torch::manual_seed(8);
  auto qkv = torch::randn({32, 17, 192}).requires_grad_(true);  // 32 x 17 = 544 rows: 5 blocks of the bank's du
  std::vector<torch::Tensor> values;
  for (int s = 0; s < 5; ++s) values.push_back(torch::randn({32, 17, 64}).requires_grad_(true));
  const auto u0 = torch::randn({64});
  auto nw = torch::randn({64}).requires_grad_(true), nb = torch::randn({64}).requires_grad_(true);
  std::vector<torch::Tensor> results;
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    qkv.mutable_grad() = torch::Tensor();
    for (auto& v : values) v.mutable_grad() = torch::Tensor();
    auto u = u0.clone().requires_grad_(true);
    auto a = fused_self_attention(qkv, 4);
    RoutingBank bank;
    for (auto& v : values) bank.add(v);
    auto b = bank.route(u, {0, 1, 2, 3, 4}, 1e-6).first + bank.route(u * 0.5, {1, 3}, 1e-6).first;
    nw.mutable_grad() = torch::Tensor();
    auto n = fused_layer_norm(values[0], nw, nb, 1e-6);  // 544 rows: 9 blocks of the norm's sums
    (a.sum() + b.pow(2).sum() + (n * n.detach().flip(0)).sum()).backward();
    results.push_back(
        torch::cat({a.detach().flatten(), b.detach().flatten(), qkv.grad().flatten(), values[1].grad().flatten(),
                    u.grad().flatten(), n.detach().flatten(), values[0].grad().flatten(), nw.grad().flatten()}));
  }
  at::set_num_threads(before);
  EXPECT_TRUE(torch::equal(results[0], results[1]));
}

TEST(Fused, WrongShapesAndDtypesAreRejected) {
  EXPECT_THROW(fused_self_attention(torch::randn({2, 3, 10}), 2), InputError);          // 10 % 3
  EXPECT_THROW(fused_self_attention(torch::randn({2, 3, 12}), 3), InputError);          // D = 4, 3 heads
  EXPECT_THROW(fused_self_attention(torch::randint(0, 5, {2, 3, 12}), 2), InputError);  // integers
  RoutingBank bank;
  EXPECT_THROW(bank.add(torch::randn({3, 4})), InputError);  // not (B,T,d)
  bank.add(torch::randn({2, 3, 4}).to(torch::kBFloat16));    // bf16 and float sources share a float bank
  bank.add(torch::randn({2, 3, 4}));
  EXPECT_THROW(bank.add(torch::randn({2, 3, 4}, torch::kDouble)), InputError);              // not with double ones
  EXPECT_THROW(bank.route(torch::randn({4}).to(torch::kBFloat16), {0}, 1e-6), InputError);  // query in float
  EXPECT_THROW(bank.add(torch::randn({2, 3, 5})), InputError);                              // another shape
  EXPECT_THROW(bank.route(torch::randn({4}), {}, 1e-6), InputError);
  EXPECT_THROW(bank.route(torch::randn({4}), {2}, 1e-6), InputError);  // not added
  EXPECT_THROW(bank.route(torch::randn({5}), {0}, 1e-6), InputError);  // width
  EXPECT_THROW(bank.route(torch::randn({4}, torch::kDouble), {0}, 1e-6), InputError);
  const auto w = torch::ones({4}), b = torch::zeros({4});
  EXPECT_THROW(fused_layer_norm(torch::randn({2, 5}), w, b, 1e-6), InputError);  // width 5, weight 4
  EXPECT_THROW(fused_layer_norm(torch::randn({2, 4}), w.to(torch::kDouble), b, 1e-6), InputError);
  EXPECT_THROW(fused_layer_norm(torch::randn({2, 4}).to(torch::kBFloat16), w, b, 1e-6), InputError);
  EXPECT_THROW(fused_layer_norm(torch::randn({2, 4}), w, b, -1.0), InputError);
  EXPECT_THROW(fused_layer_norm(torch::randn({2, 0}), torch::ones({0}), torch::zeros({0}), 1e-6), InputError);
}
