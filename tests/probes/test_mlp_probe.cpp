// MLP probe: capacity matching within 2 %, a probe that learns a known P(correct | x) beats the
// constant predictor and approaches the Bayes log-loss, determinism under a seed, input errors.
#include <gtest/gtest.h>

#include <cmath>

#include "audit/torch/mlp_probe.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

using namespace arcal;

TEST(MlpProbe, CapacityMatchingWithinTwoPercent) {
  for (int f : {2, 5, 13, 14, 25, 40}) {
    const auto target = mlp_parameter_count(f, 64, 64);
    for (int inputs : {1, 2}) {
      auto [h1, h2] = capacity_matched_widths(inputs, target);
      const double rel = std::abs(double(mlp_parameter_count(inputs, h1, h2) - target)) / double(target);
      EXPECT_LE(rel, 0.02) << "f=" << f << " inputs=" << inputs << " widths " << h1 << "," << h2;
    }
  }
  EXPECT_EQ(mlp_parameter_count(13, 64, 64), 13 * 64 + 64 + 64 * 64 + 64 + 64 + 1);
}

TEST(MlpProbe, LearnsKnownConditionalProbability) {
  // y ~ Bern(sigmoid(3 x0 - 2 x1^2)); the Bayes log-loss on fresh data is the floor.
  Rng rng(5);
  auto make = [&](std::size_t n, std::vector<double>& x, std::vector<double>& y, std::vector<double>& p) {
    x.resize(2 * n);
    y.resize(n);
    p.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[2 * i] = rng.normal();
      x[2 * i + 1] = rng.normal();
      p[i] = 1.0 / (1.0 + std::exp(-(3 * x[2 * i] - 2 * x[2 * i + 1] * x[2 * i + 1])));
      y[i] = rng.uniform() < p[i] ? 1.0 : 0.0;
    }
  };
  std::vector<double> xtr, ytr, ptr, xev, yev, pev;
  make(3000, xtr, ytr, ptr);
  make(2000, xev, yev, pev);
  MlpProbeOptions o;
  o.restarts = 2;
  o.max_epochs = 60;
  MlpProbeInfo info;
  auto q = fit_predict_mlp_probe(xtr, 3000, 2, ytr, xev, 2000, o, &info);
  auto logloss = [&](const std::vector<double>& pr) {
    double s = 0;
    for (std::size_t i = 0; i < yev.size(); ++i) {
      const double c = std::min(std::max(pr[i], 1e-12), 1 - 1e-12);
      s -= yev[i] * std::log(c) + (1 - yev[i]) * std::log(1 - c);
    }
    return s / double(yev.size());
  };
  double base = 0;
  for (double v : ytr) base += v / 3000.0;
  const double l_probe = logloss(q), l_bayes = logloss(pev), l_const = logloss(std::vector<double>(2000, base));
  std::printf("  log-loss: constant %.4f, probe %.4f, Bayes %.4f (params %lld, epochs %.1f)\n", l_const, l_probe,
              l_bayes, static_cast<long long>(info.parameters), info.mean_epochs);
  EXPECT_LT(l_probe, l_const - 0.1);
  EXPECT_LT(l_probe - l_bayes, 0.03);  // within 0.03 nats of the Bayes risk at n = 3000
  EXPECT_EQ(info.parameters, mlp_parameter_count(2, 64, 64));
  auto q2 = fit_predict_mlp_probe(xtr, 3000, 2, ytr, xev, 2000, o);
  EXPECT_EQ(q, q2);  // seeded and deterministic
}

TEST(MlpProbe, RejectsBadInput) {
  std::vector<double> x(20, 1.0), y(20, 0.0), ev(2, 0.0);
  for (int i = 0; i < 20; ++i) y[i] = i % 2;
  MlpProbeOptions o;
  EXPECT_THROW(fit_predict_mlp_probe(x, 20, 1, y, ev, 2, o), InputError);  // constant feature
  for (int i = 0; i < 20; ++i) x[i] = i;
  y[3] = 0.5;
  EXPECT_THROW(fit_predict_mlp_probe(x, 20, 1, y, ev, 2, o), InputError);  // label not 0/1
  y[3] = 1;
  EXPECT_THROW(fit_predict_mlp_probe(x, 19, 1, y, ev, 2, o), InputError);  // shape
}
