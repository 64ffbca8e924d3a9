// Splits (k-fold, stratified halves, cross-fit), grouping tie rules, Scott's rule and the
// Nadaraya-Watson estimator against a brute-force untruncated sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "stats/kernels.hpp"
#include "stats/splits.hpp"

using namespace arcal;

TEST(Splits, KFoldBalancedAndSeeded) {
  const auto f = kfold_assignment(23, 5, 9);
  std::map<int, int> count;
  for (int v : f) ++count[v];
  ASSERT_EQ(count.size(), 5u);
  for (auto& [k, c] : count) EXPECT_TRUE(c == 4 || c == 5) << k;
  EXPECT_EQ(f, kfold_assignment(23, 5, 9));
  EXPECT_NE(f, kfold_assignment(23, 5, 10));
  EXPECT_THROW(kfold_assignment(3, 5, 1), InputError);
  EXPECT_THROW(kfold_assignment(10, 1, 1), InputError);
}

TEST(Splits, StratifiedHalvesBalancePerClassAndCrossFitSwaps) {
  std::vector<std::int64_t> y;
  for (int i = 0; i < 101; ++i) y.push_back(i % 7 == 0 ? 2 : (i % 3 == 0 ? 1 : 0));
  const auto h = stratified_halves(y, 4);
  std::map<std::int64_t, int> diff;
  int total = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    diff[y[i]] += h[i] == 0 ? 1 : -1;
    total += h[i] == 0 ? 1 : -1;
  }
  for (auto& [k, d] : diff) EXPECT_LE(std::abs(d), 1) << k;
  EXPECT_LE(std::abs(total), 1);
  const auto folds = cross_fit_halves(y, 4);
  EXPECT_EQ(folds[0].calibration, folds[1].evaluation);
  EXPECT_EQ(folds[0].evaluation, folds[1].calibration);
  EXPECT_EQ(folds[0].calibration.size() + folds[0].evaluation.size(), y.size());
  EXPECT_THROW(stratified_halves({0, -1, 1}, 1), InputError);
}

TEST(Grouping, EqualWidthEdges) {
  const auto b = equal_width_bin_index({0.0, 0.2, 0.1999, 1.0, 0.99}, 5);
  EXPECT_EQ(b, (std::vector<int>{0, 1, 0, 4, 4}));
  EXPECT_THROW(equal_width_bin_index({1.2}, 5), InputError);
}

TEST(Grouping, EqualMassTiedRunJoinsLowerGroup) {
  // Nominal sizes 2,2,2; the run of three 1s straddles the first boundary and stays in group 0.
  EXPECT_EQ(equal_mass_group_index({1, 4, 1, 2, 1, 3}, 3), (std::vector<int>{0, 2, 0, 1, 0, 2}));
  // 7 values: sizes 3,2,2 (first n mod 3 groups get one extra).
  EXPECT_EQ(equal_mass_group_index({7, 6, 5, 4, 3, 2, 1}, 3), (std::vector<int>{2, 2, 1, 1, 0, 0, 0}));
  // All tied: everything in the lowest group.
  EXPECT_EQ(equal_mass_group_index({5, 5, 5, 5}, 3), (std::vector<int>{0, 0, 0, 0}));
}

TEST(Kernels, ScottRule) {
  // sd(1..5, ddof 1) = sqrt(2.5); n^(-1/6) in 2-D, n^(-1/5) in 1-D.
  const std::vector<double> v = {1, 2, 3, 4, 5};
  EXPECT_NEAR(scott_bandwidth(v, 2), std::sqrt(2.5) * std::pow(5.0, -1.0 / 6), 1e-15);
  EXPECT_NEAR(scott_bandwidth(v, 1, 0.5), 0.5 * std::sqrt(2.5) * std::pow(5.0, -0.2), 1e-15);
  EXPECT_THROW(scott_bandwidth({2, 2, 2}, 2), InputError);
  EXPECT_THROW(scott_bandwidth({1}, 1), InputError);
}

TEST(Kernels, NadarayaWatsonMatchesBruteForce) {
  Rng rng(8);
  const std::size_t n = 400, m = 50;
  std::vector<double> x(2 * n), y(n), q(2 * m);
  for (std::size_t i = 0; i < n; ++i) {
    x[2 * i] = rng.normal();
    x[2 * i + 1] = 3.0 * rng.normal();
    y[i] = rng.uniform() < 0.7 ? 1.0 : 0.0;
  }
  for (auto& v : q) v = 2.0 * rng.normal();
  const std::vector<double> h = {0.3, 0.8};
  NadarayaWatsonOptions opt;
  opt.prior = 0.5;
  const auto est = NadarayaWatson(x, y, 2, h, opt).predict(q);
  for (std::size_t i = 0; i < m; ++i) {
    double num = 0, den = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const double u = (q[2 * i] - x[2 * j]) / h[0], w = (q[2 * i + 1] - x[2 * j + 1]) / h[1];
      const double k = std::exp(-0.5 * (u * u + w * w));
      num += k * y[j];
      den += k;
    }
    const double want = std::clamp((num + 0.5) / (den + 1.0), 1e-4, 1 - 1e-4);
    EXPECT_NEAR(est[i], want, 1e-12) << i;
  }
  // Far from all data, the estimate falls back to the prior; a huge bandwidth gives the shrunk mean.
  EXPECT_NEAR(NadarayaWatson(x, y, 2, h, opt).predict({100.0, 100.0})[0], 0.5, 1e-12);
  double ybar = 0;
  for (double v : y) ybar += v;
  const auto wide = NadarayaWatson(x, y, 2, {1e6, 1e6}, {}).predict({0.0, 0.0});
  EXPECT_NEAR(wide[0], (ybar + ybar / n) / (n + 1.0), 1e-9);
  EXPECT_THROW(NadarayaWatson(x, y, 2, {0.0, 1.0}), InputError);
  EXPECT_THROW(NadarayaWatson(x, y, 3, {1.0, 1.0, 1.0}), InputError);
}

TEST(NadarayaWatson, PredictManyEqualsOneEstimatorPerTarget) {
  // Many targets on the same points (the sensitivity audit's label draws): every column must be
  // exactly the single-target estimate, in 2-D with truncation active and a data-mean prior.
  Rng rng(17);
  const std::size_t n = 400, m = 60;
  std::vector<double> x(2 * n), q(2 * m);
  for (auto& v : x) v = rng.normal();
  for (auto& v : q) v = 2 * rng.normal();
  std::vector<std::vector<double>> ys(4, std::vector<double>(n));
  for (auto& y : ys)
    for (auto& v : y) v = rng.uniform() < 0.7 ? 1.0 : 0.0;
  const std::vector<double> h{0.3, 0.5};
  std::vector<const std::vector<double>*> yp;
  for (const auto& y : ys) yp.push_back(&y);
  const auto many = NadarayaWatson(x, ys[0], 2, h).predict_many(q, yp);
  ASSERT_EQ(many.size(), ys.size());
  for (std::size_t t = 0; t < ys.size(); ++t) EXPECT_EQ(many[t], NadarayaWatson(x, ys[t], 2, h).predict(q)) << t;
  std::vector<double> short_y(n - 1, 0.0);
  EXPECT_THROW(NadarayaWatson(x, ys[0], 2, h).predict_many(q, {&short_y}), InputError);
}

namespace {

/// The untruncated O(n m) Nadaraya-Watson sum, written out independently of kernels.cpp.
std::vector<double> brute_force_nw(const std::vector<double>& x, const std::vector<double>& y, std::size_t dims,
                                   const std::vector<double>& h, const std::vector<double>& q, double prior) {
  const std::size_t n = y.size(), m = q.size() / dims;
  std::vector<double> out(m);
  for (std::size_t i = 0; i < m; ++i) {
    long double num = 0, den = 0;
    for (std::size_t j = 0; j < n; ++j) {
      double u2 = 0;
      for (std::size_t d = 0; d < dims; ++d) {
        const double u = (q[i * dims + d] - x[j * dims + d]) / h[d];
        u2 += u * u;
      }
      const double k = std::exp(-0.5 * u2);
      num += k * y[j];
      den += k;
    }
    out[i] = std::clamp(static_cast<double>((num + prior) / (den + 1.0L)), 1e-4, 1 - 1e-4);
  }
  return out;
}

}  // namespace

TEST(NadarayaWatson, FastPathWithinOneInAMillionOfTheExactSumAtEveryScottMultiple) {
  // The box expansion (issue 26) against the exact O(n^2) sum at the audit's bandwidths (Scott
  // multiples 0.25..4 of sd n^(-1/6), and n^(-1/5) in 1-D), on skewed, correlated data with a tail of
  // outliers and queries inside, between and beyond the data.
  Rng rng(26);
  const std::size_t n = 12000, m = 600;
  std::vector<double> x(2 * n), y(n), x1(n), q(2 * m), q1(m);
  for (std::size_t i = 0; i < n; ++i) {
    const double a = rng.normal(), b = rng.normal();
    x[2 * i] = (i % 50 == 0) ? 6.0 * a : std::exp(0.6 * a);  // logit c: skewed, 2 % outliers
    x[2 * i + 1] = 0.7 * a + 0.3 * b;                        // s: correlated with it
    x1[i] = x[2 * i];
    y[i] = rng.uniform() < 1.0 / (1.0 + std::exp(-x[2 * i] + x[2 * i + 1])) ? 1.0 : 0.0;
  }
  for (std::size_t i = 0; i < m; ++i) {
    const std::size_t j = (i * 7919) % n;
    const double far = i % 10 == 0 ? 4.0 * rng.normal() : 0.0;
    q[2 * i] = x[2 * j] + 0.1 * rng.normal() + far;
    q[2 * i + 1] = x[2 * j + 1] + 0.1 * rng.normal();
    q1[i] = q[2 * i];
  }
  double ybar = 0;
  for (double v : y) ybar += v;
  ybar /= n;
  double worst = 0;
  for (const double mult : {0.25, 0.5, 1.0, 2.0, 4.0}) {
    std::vector<double> cols0(x1), cols1(n);
    for (std::size_t i = 0; i < n; ++i) cols1[i] = x[2 * i + 1];
    const std::vector<double> h2{scott_bandwidth(cols0, 2, mult), scott_bandwidth(cols1, 2, mult)};
    NadarayaWatson fast2(x, y, 2, h2);
    ASSERT_TRUE(fast2.fast());
    const auto got2 = fast2.predict(q), want2 = brute_force_nw(x, y, 2, h2, q, ybar);
    // At the fitting points themselves (dense target boxes: the local expansions), every 30th checked.
    const auto self2 = fast2.predict(x);
    std::vector<double> qs;
    for (std::size_t i = 0; i < n; i += 30) qs.insert(qs.end(), {x[2 * i], x[2 * i + 1]});
    const auto want_self = brute_force_nw(x, y, 2, h2, qs, ybar);
    for (std::size_t k = 0; k < want_self.size(); ++k) {
      EXPECT_NEAR(self2[30 * k], want_self[k], 1e-6) << "2-D at the data, multiple " << mult << ", point " << 30 * k;
      worst = std::max(worst, std::abs(self2[30 * k] - want_self[k]));
    }
    const std::vector<double> h1{scott_bandwidth(x1, 1, mult)};
    NadarayaWatson fast1(x1, y, 1, h1);
    ASSERT_TRUE(fast1.fast());
    const auto got1 = fast1.predict(q1), want1 = brute_force_nw(x1, y, 1, h1, q1, ybar);
    for (std::size_t i = 0; i < m; ++i) {
      EXPECT_NEAR(got2[i], want2[i], 1e-6) << "2-D, multiple " << mult << ", query " << i;
      EXPECT_NEAR(got1[i], want1[i], 1e-6) << "1-D, multiple " << mult << ", query " << i;
      worst = std::max({worst, std::abs(got2[i] - want2[i]), std::abs(got1[i] - want1[i])});
    }
  }
  EXPECT_LT(worst, 1e-8);  // the fast path's own tolerance is 1e-9 (plus the window's exp(-32) per point)
  // Below the size threshold, or with fast = false, the exact sum is used.
  NadarayaWatsonOptions exact;
  exact.fast = false;
  EXPECT_FALSE(NadarayaWatson(x, y, 2, {0.3, 0.3}, exact).fast());
  EXPECT_FALSE(NadarayaWatson(std::vector<double>(x.begin(), x.begin() + 2000),
                              std::vector<double>(y.begin(), y.begin() + 1000), 2, {0.3, 0.3})
                   .fast());
}

TEST(NadarayaWatson, FastPathIsIndependentOfThreadsAndOfTheOtherTargets) {
  Rng rng(27);
  const std::size_t n = 5000, m = 3000;
  std::vector<double> x(2 * n), q(2 * m);
  for (auto& v : x) v = rng.normal();
  for (auto& v : q) v = 1.5 * rng.normal();
  std::vector<std::vector<double>> ys(3, std::vector<double>(n));
  for (auto& y : ys)
    for (auto& v : y) v = rng.uniform() < 0.6 ? 1.0 : 0.0;
  const std::vector<double> h{0.2, 0.35};
  NadarayaWatsonOptions one, two;
  one.threads = 1;
  two.threads = 2;
  const auto a = NadarayaWatson(x, ys[0], 2, h, one).predict(q);
  EXPECT_EQ(a, NadarayaWatson(x, ys[0], 2, h, two).predict(q));  // bit for bit
  std::vector<const std::vector<double>*> yp;
  for (const auto& y : ys) yp.push_back(&y);
  const auto many = NadarayaWatson(x, ys[0], 2, h, two).predict_many(q, yp);
  for (std::size_t t = 0; t < ys.size(); ++t) EXPECT_EQ(many[t], NadarayaWatson(x, ys[t], 2, h, one).predict(q)) << t;
}
