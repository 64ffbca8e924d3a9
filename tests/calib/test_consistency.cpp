// Consistency resampling and the calibration errors' test-inversion intervals (calib/consistency.hpp):
// errors from cell sums equal the metric functions, every cell sampler has the exact mean and variance
// of its Bernoulli sum, the consistency p-value agrees with a brute-force redraw of every label, and
// the interval behaves (0 lower end when calibrated, contains the median-unbiased estimate).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "calib/consistency.hpp"
#include "calib/metrics.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

using namespace arcal;

namespace {
struct Data {
  std::vector<double> probs, conf, correct;
  std::vector<std::int64_t> labels;
};
Data data(std::size_t n, std::size_t k, double temperature, std::uint64_t seed) {
  Rng rng(seed);
  Data d;
  for (std::size_t i = 0; i < n; ++i) {
    const double c = 1.0 / k + (1.0 - 1.0 / k) * std::pow(rng.uniform(), 0.4);
    const std::size_t top = rng.below(k);
    for (std::size_t j = 0; j < k; ++j) d.probs.push_back(j == top ? c : (1 - c) / (k - 1));
    const double q = 1 / (1 + std::exp(-std::log(c / (1 - c)) / temperature));
    const bool ok = rng.uniform() < q;
    d.labels.push_back(ok ? std::int64_t(top) : std::int64_t((top + 1 + rng.below(k - 1)) % k));
    d.conf.push_back(c);
    d.correct.push_back(ok);
  }
  return d;
}
}  // namespace

TEST(Consistency, CellErrorsAreTheMetrics) {
  const auto d = data(3000, 5, 1.3, 1);
  const auto width = top_label_cells(d.conf, d.correct, 15, false);
  const auto mass = top_label_cells(d.conf, d.correct, 15, true);
  const auto b = binned_calibration(d.conf, d.correct, 15);
  EXPECT_NEAR(cell_error(width, width.observed, CellError::l1), b.ece, 1e-12);
  EXPECT_NEAR(cell_error(width, width.observed, CellError::l2), b.rmsce, 1e-12);
  EXPECT_NEAR(cell_error(width, width.observed, CellError::debiased_l2),
              debiased_l2_calibration_error(d.conf, d.correct, 15).raw, 1e-12);
  EXPECT_NEAR(cell_error(mass, mass.observed, CellError::l1), adaptive_calibration_error(d.conf, d.correct, 15), 1e-12);
  const auto cw = classwise_cells(d.probs, 3000, 5, d.labels, 15);
  EXPECT_NEAR(cell_error(cw, cw.observed, CellError::l1), classwise_calibration_error(d.probs, 3000, 5, d.labels, 15),
              1e-12);
}

TEST(Consistency, EverySamplerHasTheBernoulliSumsMeanAndVariance) {
  // Cells that land in each mode: normal (large variance), Poisson (tiny p), mirrored Poisson (p near
  // 1), exact (few moderate p). Mean of the draws n δ, variance Σ (p + δ)(1 − p − δ), to Monte-Carlo
  // error over 200,000 draws (5 standard errors); a shift that moves a Poisson cell out of its regime
  // (δ = 0.05 on p = 0.0002) is drawn as a translated Poisson.
  struct Case {
    std::vector<double> p;
    BernoulliSumCell::Mode mode;
  };
  std::vector<Case> cases;
  cases.push_back({std::vector<double>(400, 0.5), BernoulliSumCell::Mode::normal});
  cases.push_back({std::vector<double>(300, 0.0002), BernoulliSumCell::Mode::poisson_low});
  cases.push_back({std::vector<double>(300, 0.9998), BernoulliSumCell::Mode::poisson_high});
  cases.push_back({{0.3, 0.6, 0.8, 0.1, 0.5}, BernoulliSumCell::Mode::exact});
  for (const auto& c : cases)
    for (double delta : {0.0, 0.05}) {
      if (c.mode == BernoulliSumCell::Mode::poisson_high && delta > 0) continue;  // p + δ would exceed 1
      BernoulliSumCell cell;
      for (double p : c.p) cell.add_stats(p);
      if (cell.decide())
        for (double p : c.p) cell.add_member(p);
      ASSERT_EQ(cell.mode(), c.mode);
      double want_mean = 0, want_var = 0;
      for (double p : c.p) {
        const double q = std::min(p + delta, 1.0);
        want_mean += q - p;
        want_var += q * (1 - q);
      }
      DrawRng rng(7);
      const int R = 200000;
      double m = 0, v = 0;
      std::vector<double> x(R);
      for (auto& xi : x) m += (xi = cell.sample(rng, delta)) / R;
      for (double xi : x) v += (xi - m) * (xi - m) / (R - 1);
      EXPECT_NEAR(m, want_mean, 5 * std::sqrt(want_var / R) + 1e-9) << int(c.mode) << " " << delta;
      // The translated Poisson matches the variance within 1 by construction (exact and normal: 2 %).
      const bool poisson =
          c.mode == BernoulliSumCell::Mode::poisson_low || c.mode == BernoulliSumCell::Mode::poisson_high;
      EXPECT_NEAR(v, want_var, 5 * want_var * std::sqrt(2.0 / R) + (poisson ? 1.0 : 0.02 * want_var))
          << int(c.mode) << " " << delta;
    }
}

TEST(Consistency, PValueAgreesWithBruteForceRedraws) {
  // Brute force: redraw every label from its own confidence 20,000 times and recompute ECE.
  const auto d = data(800, 4, 1.15, 3);
  const double ece = expected_calibration_error(d.conf, d.correct, 15);
  Rng rng(9);
  const int R = 20000;
  int ge = 0;
  std::vector<double> a(d.conf.size());
  for (int r = 0; r < R; ++r) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = rng.uniform() < d.conf[i];
    ge += expected_calibration_error(d.conf, a, 15) >= ece;
  }
  const double brute = (1.0 + ge) / (R + 1.0);
  const auto fi = scaled_family_interval(top_label_cells(d.conf, d.correct, 15, false), CellError::l1, 0.95, 20000, 4);
  // The cells' normal approximations (variance >= 10) against exact redraws: within 0.02.
  EXPECT_NEAR(fi.consistency_p, brute, 0.02) << brute;
}

TEST(Consistency, IntervalShape) {
  // Calibrated: consistency not rejected -> lower end 0; clearly miscalibrated: lower end above 0,
  // the median-unbiased estimate inside and below the plug-in value.
  const auto cal = data(2000, 10, 1.0, 5);
  const auto miscal = data(2000, 10, 1.6, 6);
  const auto a =
      scaled_family_interval(top_label_cells(cal.conf, cal.correct, 15, false), CellError::l1, 0.95, 1000, 1);
  if (a.consistency_p > 0.025) {
    EXPECT_EQ(a.low, 0.0);
  }
  const auto cells = top_label_cells(miscal.conf, miscal.correct, 15, false);
  const auto b = scaled_family_interval(cells, CellError::l1, 0.95, 1000, 1);
  EXPECT_LT(b.consistency_p, 0.01);
  EXPECT_GT(b.low, 0.0);
  EXPECT_LE(b.low, b.median_unbiased);
  EXPECT_GE(b.high, b.median_unbiased);
  EXPECT_LT(b.median_unbiased, cell_error(cells, cells.observed, CellError::l1));
  EXPECT_THROW(scaled_family_interval(cells, CellError::l1, 1.5, 100, 1), InputError);
  EXPECT_THROW(top_label_cells({}, {}, 15, false), InputError);
}
