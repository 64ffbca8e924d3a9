// MLP probe: capacity matching within 2 %, a probe that learns a known P(correct | x) beats the
// constant predictor and approaches the Bayes log-loss, determinism under a seed, stacked fits equal
// separate fits, concurrent fits equal serial ones, input errors.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <set>
#include <thread>

#include "ops/blas.hpp"
#include "audit/mlp_probe.hpp"
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
  std::vector<double> x(20, 1.0), y(20, 0.0), ev{1.0, 7.0};
  for (int i = 0; i < 20; ++i) y[i] = i % 2;
  MlpProbeOptions o;
  // A feature constant on the training rows enters as 0 on both sides (docs/method.md §6.3): the fit is
  // the constant predictor, whatever the evaluation rows hold (7 was never seen in training).
  const auto flat = fit_predict_mlp_probe(x, 20, 1, y, ev, 2, o);
  EXPECT_EQ(flat[0], flat[1]);
  EXPECT_NEAR(flat[0], 0.5, 0.1);
  ev.assign(2, 0.0);
  for (int i = 0; i < 20; ++i) x[i] = i;
  y[3] = 0.5;
  EXPECT_THROW(fit_predict_mlp_probe(x, 20, 1, y, ev, 2, o), InputError);  // label not 0/1
  y[3] = 1;
  EXPECT_THROW(fit_predict_mlp_probe(x, 19, 1, y, ev, 2, o), InputError);  // shape
}

namespace {

// n rows of f standard-normal features and R label vectors y_r ~ Bern(sigmoid(x0 + 0.5 r x1)).
void stacked_data(std::size_t n, std::size_t f, std::size_t R, std::uint64_t seed, std::vector<double>& x,
                  std::vector<std::vector<double>>& ys) {
  Rng rng(seed);
  x.resize(n * f);
  for (auto& v : x) v = rng.normal();
  ys.assign(R, std::vector<double>(n));
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t i = 0; i < n; ++i)
      ys[r][i] = rng.uniform() < 1.0 / (1.0 + std::exp(-(x[i * f] + 0.5 * double(r) * x[i * f + 1]))) ? 1.0 : 0.0;
}

}  // namespace

TEST(MlpProbe, StackedFitsEqualSeparateFits) {
  // Replicate r of a stacked fit must be the fit of its labels alone (same seed, same warm start):
  // the stack shares inputs, split and batch order, but no arithmetic across replicates. Checked cold
  // and warm-started, with replicates stopping at different epochs (so the stack shrinks).
  arcal::set_blas_threads(1);
  const std::size_t n = 700, f = 3, m = 50, R = 5;
  std::vector<double> x;
  std::vector<std::vector<double>> ys;
  stacked_data(n, f, R, 21, x, ys);
  const std::vector<double> xe(x.begin(), x.begin() + long(m * f));
  MlpProbeOptions o;
  o.restarts = 2;
  o.max_epochs = 40;
  o.patience = 3;
  o.batch_size = 128;
  o.seed = 9;
  std::vector<const std::vector<double>*> yp;
  for (const auto& y : ys) yp.push_back(&y);
  std::vector<MlpProbeInfo> infos;
  const auto stacked = fit_predict_mlp_probes(x, n, f, yp, xe, m, o, &infos);
  ASSERT_EQ(stacked.size(), R);
  double max_diff = 0;
  std::set<double> epochs;
  for (std::size_t r = 0; r < R; ++r) {
    MlpProbeInfo info;
    const auto alone = fit_predict_mlp_probe(x, n, f, ys[r], xe, m, o, &info);
    for (std::size_t i = 0; i < m; ++i) max_diff = std::max(max_diff, std::abs(alone[i] - stacked[r][i]));
    EXPECT_EQ(info.mean_epochs, infos[r].mean_epochs) << "replicate " << r;
    epochs.insert(infos[r].mean_epochs);
  }
  std::printf("  cold: max |stacked - alone| = %.3g over %zu replicates, %zu distinct mean epochs\n", max_diff, R,
              epochs.size());
  EXPECT_LE(max_diff, 1e-6);  // float32 networks; the same ops on the same values
  EXPECT_GE(epochs.size(), 2u);
  // Warm-started from replicate 0's weights.
  o.restarts = 1;
  o.warm_start = &infos[0].weights;
  const auto warm = fit_predict_mlp_probes(x, n, f, yp, xe, m, o);
  max_diff = 0;
  for (std::size_t r = 0; r < R; ++r) {
    const auto alone = fit_predict_mlp_probe(x, n, f, ys[r], xe, m, o);
    for (std::size_t i = 0; i < m; ++i) max_diff = std::max(max_diff, std::abs(alone[i] - warm[r][i]));
  }
  std::printf("  warm: max |stacked - alone| = %.3g\n", max_diff);
  EXPECT_LE(max_diff, 1e-6);
}

TEST(MlpProbe, ConcurrentFitsMatchSerialFits) {
  // The initialisation uses a generator of its own, so fits on two threads at once give the serial
  // results (a process-wide generator would make them depend on the interleaving).
  arcal::set_blas_threads(1);
  const std::size_t n = 500, f = 2, m = 40;
  std::vector<double> x;
  std::vector<std::vector<double>> ys;
  stacked_data(n, f, 2, 33, x, ys);
  const std::vector<double> xe(x.begin(), x.begin() + long(m * f));
  MlpProbeOptions o;
  o.restarts = 2;
  o.max_epochs = 15;
  std::array<std::vector<double>, 2> serial, parallel;
  for (std::size_t t = 0; t < 2; ++t) {
    MlpProbeOptions ot = o;
    ot.seed = 100 + t;
    serial[t] = fit_predict_mlp_probe(x, n, f, ys[t], xe, m, ot);
  }
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < 2; ++t)
    pool.emplace_back([&, t] {
      MlpProbeOptions ot = o;
      ot.seed = 100 + t;
      parallel[t] = fit_predict_mlp_probe(x, n, f, ys[t], xe, m, ot);
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(serial[0], parallel[0]);
  EXPECT_EQ(serial[1], parallel[1]);
}

TEST(MlpProbe, OffsetCorrectionStartsAtOffsetAndLearnsAnEffect) {
  // y ~ Bern(sigmoid(b + 0.8 x)) with b a known offset: the correction on x must start at exactly
  // sigmoid(b) (zero output layer) and learn most of the 0.8 x term.
  Rng rng(11);
  const std::size_t n = 4000, m = 2000;
  auto make = [&](std::size_t k, std::vector<double>& x, std::vector<double>& b, std::vector<double>& y,
                  std::vector<double>& p) {
    x.resize(k);
    b.resize(k);
    y.resize(k);
    p.resize(k);
    for (std::size_t i = 0; i < k; ++i) {
      x[i] = rng.normal();
      b[i] = 2 * rng.normal();
      p[i] = 1.0 / (1.0 + std::exp(-(b[i] + 0.8 * x[i])));
      y[i] = rng.uniform() < p[i] ? 1.0 : 0.0;
    }
  };
  std::vector<double> xtr, btr, ytr, ptr, xev, bev, yev, pev;
  make(n, xtr, btr, ytr, ptr);
  make(m, xev, bev, yev, pev);
  MlpOffsets off{{btr}, {bev}};
  MlpProbeOptions o;
  o.restarts = 1;
  o.max_epochs = 0;  // no training: the kept state is the starting point
  const auto start = fit_predict_mlp_probe(xtr, n, 1, ytr, xev, m, o, nullptr, &off);
  for (std::size_t i = 0; i < m; ++i) ASSERT_NEAR(start[i], 1 / (1 + std::exp(-bev[i])), 1e-6) << i;  // float32 offsets
  auto logloss = [&](const std::vector<double>& pr) {
    double s = 0;
    for (std::size_t i = 0; i < m; ++i) s -= yev[i] * std::log(pr[i]) + (1 - yev[i]) * std::log(1 - pr[i]);
    return s / double(m);
  };
  o.max_epochs = 100;
  o.restarts = 2;
  const auto fitted = fit_predict_mlp_probe(xtr, n, 1, ytr, xev, m, o, nullptr, &off);
  const double l0 = logloss(start), l1 = logloss(fitted), lb = logloss(pev);
  std::printf("  offset only %.4f, correction %.4f, Bayes %.4f\n", l0, l1, lb);
  EXPECT_GT((l0 - l1) / (l0 - lb), 0.7);  // recovers most of the effect the offset misses
  // Shapes: offsets must have 1 or R rows of n (train) and m (eval) values.
  MlpOffsets bad{{btr}, {std::vector<double>(m - 1, 0.0)}};
  EXPECT_THROW(fit_predict_mlp_probe(xtr, n, 1, ytr, xev, m, o, nullptr, &bad), InputError);
  bad = MlpOffsets{{btr, btr}, {bev}};
  EXPECT_THROW(fit_predict_mlp_probe(xtr, n, 1, ytr, xev, m, o, nullptr, &bad), InputError);
}

TEST(MlpProbe, BlockedPassesAndRowSourcesMatchTheWholeRows) {
  // Large evaluation sets run in row blocks of about 2^22 activations (65,536 rows at width 64), and
  // a row source hands the fit its rows one set at a time: neither may change a prediction. The same
  // fit predicts 70,000 rows (two blocks) and their first 200 alone; and a source that fills its buffer
  // gives the fit of the stored rows.
  arcal::set_blas_threads(1);
  const std::size_t n = 400, f = 3, R = 2, big = 70000, small = 200;
  std::vector<double> x;
  std::vector<std::vector<double>> ys;
  stacked_data(n, f, R, 31, x, ys);
  Rng rng(32);
  std::vector<double> xe(big * f);
  for (auto& v : xe) v = rng.normal();
  const std::vector<double> xs(xe.begin(), xe.begin() + long(small * f));
  MlpProbeOptions o;
  o.restarts = 1;
  o.max_epochs = 15;
  o.patience = 3;
  o.batch_size = 128;
  o.seed = 4;
  std::vector<const std::vector<double>*> yp;
  for (const auto& y : ys) yp.push_back(&y);
  const auto whole = fit_predict_mlp_probes(x, n, f, yp, xe, big, o);
  const auto part = fit_predict_mlp_probes(x, n, f, yp, xs, small, o);
  double diff = 0;
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t i = 0; i < small; ++i) diff = std::max(diff, std::abs(whole[r][i] - part[r][i]));
  std::printf("  max |blocked - unblocked| = %.3g\n", diff);
  EXPECT_LE(diff, 1e-6);
  // Per-replicate rows from a source (replicate 1's rows negated) against the stored-rows entry point.
  std::vector<double> neg(x), neg_e(xs);
  for (auto& v : neg) v = -v;
  for (auto& v : neg_e) v = -v;
  const auto stored = fit_predict_mlp_probes_rows({&x, &neg}, n, f, yp, {&xs, &neg_e}, small, o);
  MlpRowSource src;
  src.train_sets = src.eval_sets = 2;
  int calls = 0;
  src.train = [&](std::size_t s, std::vector<double>& buf) -> const std::vector<double>& {
    ++calls;
    return buf = s == 0 ? x : neg;
  };
  src.eval = [&](std::size_t s, std::vector<double>& buf) -> const std::vector<double>& {
    ++calls;
    return buf = s == 0 ? xs : neg_e;
  };
  const auto sourced = fit_predict_mlp_probes_source(src, n, f, yp, small, o);
  EXPECT_EQ(calls, 4);  // each set once for training, once for the one restart's predictions
  for (std::size_t r = 0; r < R; ++r) EXPECT_EQ(sourced[r], stored[r]) << "replicate " << r;
  // A source's bad evaluation rows are named when they are read.
  src.eval = [&](std::size_t, std::vector<double>& buf) -> const std::vector<double>& {
    buf = xs;
    buf[7] = std::nan("");
    return buf;
  };
  EXPECT_THROW(fit_predict_mlp_probes_source(src, n, f, yp, small, o), InputError);
}
