// Routing statistics (method.md §3) against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "audit/routing_stats.hpp"
#include "core/error.hpp"

using namespace arcal;

namespace {
Trace two_point_trace() {
  Trace t;
  t.n = 2;
  t.classes = 2;
  t.logits = {0, 1, 1, 0};
  t.labels = {1, 0};
  t.points = 2;
  t.sources = 3;
  t.routing_sources = {1, 3};
  // example 0: point 0 trivially [1]; point 1 uniform over 3 sources
  // example 1: point 1 all mass on the last source
  t.routing = {1, 0, 0, 1.f / 3, 1.f / 3, 1.f / 3, 1, 0, 0, 0, 0, 1};
  t.path = "t.npz";
  return t;
}
}  // namespace

TEST(RoutingStats, FromTokenMeanWeights) {
  const auto r = routing_statistics(two_point_trace());
  EXPECT_FALSE(r.per_token);
  EXPECT_EQ(r.profile_points, (std::vector<std::size_t>{1}));
  // uniform over 3: H = log 3, normalised 1; depths {0, .5, 1}: mean .5, var (.25 + 0 + .25)/3
  EXPECT_NEAR(r.entropy[1], std::log(3.0), 1e-6);
  EXPECT_NEAR(r.norm_entropy[1], 1.0, 1e-6);
  EXPECT_EQ(r.norm_entropy[0], 0.0);  // S_p = 1
  EXPECT_NEAR(r.depth_mean[1], 0.5, 1e-6);
  EXPECT_NEAR(r.depth_var[1], 1.0 / 6.0, 1e-6);
  EXPECT_NEAR(r.re[0], 0.5, 1e-6);  // mean over P = 2 points of {0, 1}
  EXPECT_NEAR(r.rdv[0], 1.0 / 12.0, 1e-6);
  EXPECT_NEAR(r.re[1], 0.0, 1e-12);
  EXPECT_NEAR(r.depth_mean[3], 1.0, 1e-12);
  EXPECT_NEAR(r.rdv[1], 0.0, 1e-12);
}

TEST(RoutingStats, PrefersPerTokenArrays) {
  Trace t = two_point_trace();
  t.routing_entropy = {0, 0.5f, 0, 0.25f};
  t.routing_depth_mean = {0, 0.4f, 0, 0.9f};
  t.routing_depth_var = {0, 0.2f, 0, 0.1f};
  const auto r = routing_statistics(t);
  EXPECT_TRUE(r.per_token);
  EXPECT_NEAR(r.norm_entropy[1], 0.5 / std::log(3.0), 1e-7);
  EXPECT_NEAR(r.re[1], 0.25 / std::log(3.0) / 2, 1e-7);
  EXPECT_NEAR(r.rdv[0], 0.1, 1e-7);
  EXPECT_NEAR(statistic_column(t, "rdv")[1], 0.05, 1e-7);
}

TEST(RoutingStats, ErrorsWithoutRouting) {
  Trace t = two_point_trace();
  t.routing.clear();
  EXPECT_THROW(routing_statistics(t), InputError);
  EXPECT_THROW(statistic_column(two_point_trace(), "nope"), InputError);
}

TEST(RoutingStats, EntropyAloneIsUsed) {
  // A recorder of MoE gates writes routing_entropy without the depth arrays; it used to be ignored
  // (re came from the entropy of the token-mean gate).
  Trace t = two_point_trace();
  t.routing_entropy = {0, 0.5f, 0, 0.25f};
  const auto r = routing_statistics(t);
  EXPECT_TRUE(r.per_token);
  EXPECT_FALSE(r.per_token_depth);
  EXPECT_NEAR(r.re[1], 0.25 / std::log(3.0) / 2, 1e-7);  // the stored per-token entropy
  EXPECT_NEAR(r.depth_var[1], 1.0 / 6.0, 1e-6);          // depth still from the token-mean weights
}

TEST(RoutingStats, UnorderedRoutingOffersEntropyOnly) {
  Trace t = two_point_trace();
  EXPECT_EQ(default_statistics(t), (std::vector<std::string>{"re", "rdv"}));
  t.routing_kind = "unordered";
  EXPECT_EQ(default_statistics(t), (std::vector<std::string>{"re"}));
  EXPECT_NEAR(statistic_column(t, "re")[0], 0.5, 1e-6);
  try {
    statistic_column(t, "rdv");
    FAIL() << "rdv of unordered routing was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("routing_kind is 'unordered'"), std::string::npos) << e.what();
  }
  Trace plain = two_point_trace();
  plain.routing.clear();
  plain.points = 0;
  EXPECT_TRUE(default_statistics(plain).empty());  // logits and labels only: nothing beyond the outputs
  plain.feature_names = {"a", "b"};
  EXPECT_EQ(default_statistics(plain), (std::vector<std::string>{"a", "b"}));
}
