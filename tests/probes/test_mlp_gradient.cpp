// The probe trainer's arithmetic (audit/mlp_probe.cpp: float32, products on OpenBLAS, GELU and AdamW
// of src/ops) against an independent double-precision MLP written out here loop by loop, whose own
// gradient is checked by central finite differences: the loss and every weight's gradient agree, with
// offsets and soft targets. Then one AdamW step of the trainer's kernel against torch.optim.AdamW's
// documented update, computed here in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "audit/mlp_probe.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "ops/adamw.hpp"

using namespace arcal;

namespace {

struct RefMlp {
  int f, h1, h2;
  std::vector<double> w;  // W1 [h1,f], b1, W2 [h2,h1], b2, W3 [h2], b3, as MlpWeights
};

double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

/// Mean BCE of the reference MLP (forward only, double).
double ref_loss(const RefMlp& m, const std::vector<double>& x, const std::vector<double>& y,
                const std::vector<double>& off) {
  const std::size_t rows = y.size();
  const double* W1 = m.w.data();
  const double* b1 = W1 + m.h1 * m.f;
  const double* W2 = b1 + m.h1;
  const double* b2 = W2 + m.h2 * m.h1;
  const double* W3 = b2 + m.h2;
  const double b3 = W3[m.h2];
  double total = 0;
  for (std::size_t i = 0; i < rows; ++i) {
    std::vector<double> a1(m.h1), a2(m.h2);
    for (int j = 0; j < m.h1; ++j) {
      double s = b1[j];
      for (int k = 0; k < m.f; ++k) s += W1[j * m.f + k] * x[i * m.f + k];
      a1[j] = gelu(s);
    }
    for (int j = 0; j < m.h2; ++j) {
      double s = b2[j];
      for (int k = 0; k < m.h1; ++k) s += W2[j * m.h1 + k] * a1[k];
      a2[j] = gelu(s);
    }
    double z = b3 + off[i];
    for (int j = 0; j < m.h2; ++j) z += W3[j] * a2[j];
    total += std::max(z, 0.0) - z * y[i] + std::log1p(std::exp(-std::abs(z)));
  }
  return total / double(rows);
}

}  // namespace

TEST(MlpGradient, MatchesADoublePrecisionReferenceByFiniteDifferences) {
  const int f = 4, h1 = 6, h2 = 5;
  const std::size_t rows = 37;
  Rng rng(5);
  RefMlp ref{f, h1, h2, {}};
  const std::size_t P = std::size_t(mlp_parameter_count(f, h1, h2));
  for (std::size_t i = 0; i < P; ++i) ref.w.push_back(rng.uniform() - 0.5);
  std::vector<double> x(rows * f), y(rows), off(rows);
  for (auto& v : x) v = 2 * rng.normal();
  for (std::size_t i = 0; i < rows; ++i) {
    y[i] = i % 3 == 0 ? rng.uniform() : double(i % 2);  // soft and hard targets
    off[i] = rng.normal();
  }
  // The trainer's float inputs are the reference's values rounded: the reference uses the rounded
  // values too, so only the arithmetic differs.
  MlpWeights w{f, h1, h2, {}};
  const std::size_t sizes[6] = {std::size_t(h1 * f), std::size_t(h1), std::size_t(h2 * h1),
                                std::size_t(h2),     std::size_t(h2), 1};
  std::size_t at = 0;
  for (std::size_t sz : sizes) {
    std::vector<float> t;
    for (std::size_t i = 0; i < sz; ++i, ++at) {
      t.push_back(float(ref.w[at]));
      ref.w[at] = double(t.back());
    }
    w.tensors.push_back(t);
  }
  std::vector<float> xf(x.begin(), x.end()), yf(y.begin(), y.end()), of(off.begin(), off.end());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = double(xf[i]);
  for (std::size_t i = 0; i < rows; ++i) {
    y[i] = double(yf[i]);
    off[i] = double(of[i]);
  }
  std::vector<float> grad;
  const double loss = mlp_batch_loss_gradient(w, xf, yf, of, rows, grad);
  ASSERT_EQ(grad.size(), P);
  const double ref_l = ref_loss(ref, x, y, off);
  EXPECT_NEAR(loss, ref_l, 1e-5 * std::abs(ref_l));
  double worst = 0;
  for (std::size_t p = 0; p < P; ++p) {
    const double h = 1e-5;
    RefMlp plus = ref, minus = ref;
    plus.w[p] += h;
    minus.w[p] -= h;
    const double fd = (ref_loss(plus, x, y, off) - ref_loss(minus, x, y, off)) / (2 * h);
    // float32 products and erff against double: relative 1e-3 of the gradient's scale.
    const double err = std::abs(double(grad[p]) - fd) / (std::abs(fd) + 1e-3);
    worst = std::max(worst, err);
    EXPECT_LE(err, 2e-3) << "parameter " << p << ": trainer " << grad[p] << ", finite differences " << fd;
  }
  std::printf("  loss %.9g (reference %.9g); worst relative gradient error %.3g over %zu parameters\n", loss, ref_l,
              worst, P);
}

TEST(MlpGradient, RefusesWeightsOfTheWrongShape) {
  MlpWeights w{3,
               4,
               4,
               {std::vector<float>(12), std::vector<float>(4), std::vector<float>(16), std::vector<float>(4),
                std::vector<float>(4), std::vector<float>(1)}};
  std::vector<float> grad;
  EXPECT_NO_THROW(
      mlp_batch_loss_gradient(w, std::vector<float>(6), std::vector<float>(2), std::vector<float>(2), 2, grad));
  w.tensors[2].resize(15);
  EXPECT_THROW(mlp_batch_loss_gradient(w, std::vector<float>(6), std::vector<float>(2), std::vector<float>(2), 2, grad),
               InputError);
}

TEST(AdamwKernel, OneStepIsTorchsDocumentedUpdate) {
  // torch.optim.AdamW: p <- p (1 - lr wd); m <- b1 m + (1 - b1) g; v <- b2 v + (1 - b2) g^2;
  // p <- p - lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps), here at step t = 3 in double.
  const double lr = 1e-3, wd = 1e-4, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<double> p{0.5, -1.25, 2.0}, g{0.1, -0.3, 1e-6}, m{0.01, 0.02, -0.03}, v{1e-4, 2e-4, 3e-6};
  std::vector<double> pe = p, me = m, ve = v;
  for (std::size_t i = 0; i < 3; ++i) {
    pe[i] *= 1 - lr * wd;
    me[i] = b1 * me[i] + (1 - b1) * g[i];
    ve[i] = b2 * ve[i] + (1 - b2) * g[i] * g[i];
    pe[i] -= lr / (1 - std::pow(b1, 3)) * me[i] / (std::sqrt(ve[i] / (1 - std::pow(b2, 3))) + eps);
  }
  adamw_kernel(p.data(), g.data(), m.data(), v.data(), 0, 3, adamw_scalars_double(lr, wd, b1, b2, eps, 3));
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(p[i], pe[i], 1e-15 * std::abs(pe[i]) + 1e-18) << i;
    EXPECT_NEAR(m[i], me[i], 1e-17) << i;
    EXPECT_NEAR(v[i], ve[i], 1e-19) << i;
  }
}
