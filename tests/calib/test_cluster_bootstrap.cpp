// The metrics' cluster bootstrap (method.md §6.9, issue 27): with clusters the bootstrap resamples
// whole clusters. Checked against a closed form: 100 clusters of 20 identical copies carry the
// information of 100 examples, so the cluster interval of the accuracy must match the example-level
// interval of the 100 distinct examples (and be about sqrt(20) times the naive example-level one over
// the 2,000 rows), and singleton clusters must reproduce the example-level width.
#include <gtest/gtest.h>

#include <cmath>

#include "calib/metrics.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

namespace arcal {
namespace {

struct Data {
  std::vector<double> probs;
  std::vector<std::int64_t> labels, cluster;
};

/// n distinct binary predictions, each repeated `copies` times in a row (cluster = the distinct one).
Data repeated(std::size_t n, std::size_t copies, std::uint64_t seed) {
  Rng rng(seed);
  Data d;
  for (std::size_t i = 0; i < n; ++i) {
    const double c = 0.55 + 0.4 * rng.uniform();
    const std::int64_t y = rng.uniform() < c ? 0 : 1;  // class 0 predicted, correct with probability c
    for (std::size_t k = 0; k < copies; ++k) {
      d.probs.push_back(c);
      d.probs.push_back(1 - c);
      d.labels.push_back(y);
      d.cluster.push_back(static_cast<std::int64_t>(i));
    }
  }
  return d;
}

double width(const Estimate& e) { return e.ci.high - e.ci.low; }

TEST(ClusterBootstrap, CopiesInOneClusterCountOnce) {
  ReportOptions o;
  o.draws = 2000;
  o.consistency_draws = 0;
  const Data distinct = repeated(100, 1, 3), copies = repeated(100, 20, 3);
  const auto base = calibration_report(distinct.probs, 100, 2, distinct.labels, o);
  const auto naive = calibration_report(copies.probs, 2000, 2, copies.labels, o);
  ReportOptions oc = o;
  oc.cluster = copies.cluster;
  const auto clustered = calibration_report(copies.probs, 2000, 2, copies.labels, oc);
  EXPECT_EQ(clustered.clusters, 100u);
  EXPECT_EQ(naive.clusters, 0u);
  EXPECT_DOUBLE_EQ(clustered.accuracy.value, base.accuracy.value);
  EXPECT_NEAR(width(clustered.accuracy) / width(base.accuracy), 1.0, 0.15);
  EXPECT_NEAR(width(clustered.nll) / width(base.nll), 1.0, 0.15);
  EXPECT_NEAR(width(clustered.accuracy) / width(naive.accuracy), std::sqrt(20.0), 0.8);
  // With clusters the calibration errors get the cluster bootstrap's interval (around the plug-in
  // value), and no consistency test.
  EXPECT_TRUE(std::isfinite(clustered.ece.ci.low));
  EXPECT_LE(clustered.ece.ci.low, clustered.ece.value);
  EXPECT_GE(clustered.ece.ci.high, clustered.ece.value);
  EXPECT_TRUE(std::isnan(clustered.consistency_p));
  EXPECT_TRUE(std::isnan(clustered.classwise_ece.ci.low));
}

TEST(ClusterBootstrap, SingletonClustersMatchTheExampleBootstrap) {
  ReportOptions o;
  o.draws = 2000;
  o.consistency_draws = 0;
  const Data d = repeated(3000, 1, 8);
  const auto plain = calibration_report(d.probs, 3000, 2, d.labels, o);
  ReportOptions oc = o;
  oc.cluster = d.cluster;
  const auto singletons = calibration_report(d.probs, 3000, 2, d.labels, oc);
  EXPECT_NEAR(width(singletons.accuracy) / width(plain.accuracy), 1.0, 0.1);
  EXPECT_NEAR(width(singletons.brier) / width(plain.brier), 1.0, 0.1);
}

TEST(ClusterBootstrap, BadClustersAreRefusedByName) {
  const Data d = repeated(10, 2, 1);
  ReportOptions o;
  o.draws = 10;
  o.cluster = std::vector<std::int64_t>(19, 0);
  EXPECT_THROW(calibration_report(d.probs, 20, 2, d.labels, o), InputError);
  o.cluster = std::vector<std::int64_t>(20, 4);  // one cluster
  EXPECT_THROW(calibration_report(d.probs, 20, 2, d.labels, o), InputError);
  o.cluster = d.cluster;
  o.cluster[3] = -2;
  try {
    calibration_report(d.probs, 20, 2, d.labels, o);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster[3]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace arcal
