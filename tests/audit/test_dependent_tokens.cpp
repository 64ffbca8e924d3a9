// The audit on dependent examples (method.md §6.9 "Dependent examples", issue 27): simulated token data whose routing
// statistic and correctness are both correlated inside a sequence. The clustered decision test must
// hold its level on a clean and a confounded null, the example-level test must not (the reason for
// the clustered one), and the clustered test must find a planted effect. The splits keep clusters
// whole. docs/audit_validation.md "Dependent tokens" quotes these counts.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "audit/audit.hpp"
#include "audit/diagnostic.hpp"
#include "audit/integrity.hpp"
#include "audit/run_input.hpp"
#include "audit/simulate.hpp"
#include "audit_test_util.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "stats/splits.hpp"

namespace arcal {
namespace {

using test_util::binomial_band_99;

TokenSimulationOptions family(const std::string& name, std::uint64_t seed) {
  TokenSimulationOptions o;
  o.sequences = 150;
  o.length = 64;
  o.seed = seed;
  if (name == "confounded") {  // s tracks c inside every sequence, and the model is over-confident
    o.confound = 0.8;
    o.slope = 0.6;
  }
  return o;
}

struct Rejections {
  std::size_t clustered = 0, iid = 0;
};

Rejections count_rejections(const std::string& name, std::size_t sets, double effect, std::uint64_t base) {
  DiagnosticOptions d;
  d.permutations = 199;
  Rejections r;
  for (std::size_t k = 0; k < sets; ++k) {
    auto o = family(name, base + k);
    o.effect = effect;
    const auto sim = simulate_tokens(o);
    const auto c =
        clustered_residual_gap_test(sim.confidence, sim.correct, sim.statistic, sim.cluster, d, derive_seed(base, k));
    const auto i = residual_gap_test(sim.confidence, sim.correct, sim.statistic, d, derive_seed(base, k));
    EXPECT_EQ(c.clusters, o.sequences);
    r.clustered += c.p <= 0.05;
    r.iid += i.p <= 0.05;
  }
  return r;
}

TEST(DependentTokens, ClusteredDecisionTestHoldsItsLevelWhereTheExampleLevelTestDoesNot) {
  const std::size_t sets = test_util::long_tests() ? 400 : 100;
  const auto band = binomial_band_99(sets, 0.05);
  for (const std::string name : {"clean", "confounded"}) {
    SCOPED_TRACE(name);
    const Rejections r = count_rejections(name, sets, 0.0, name == "clean" ? 1000 : 2000);
    EXPECT_GE(r.clustered, band.first);
    EXPECT_LE(r.clustered, band.second) << "clustered: " << r.clustered << " / " << sets;
    // The example-level permutation ignores the within-sequence correlation: far above the band.
    EXPECT_GT(r.iid, band.second) << "example-level: " << r.iid << " / " << sets;
    std::printf("[dependent tokens] %s null: clustered %zu / %zu, example-level %zu / %zu (band [%zu, %zu])\n",
                name.c_str(), r.clustered, sets, r.iid, sets, band.first, band.second);
  }
}

TEST(DependentTokens, ClusteredDecisionTestFindsAPlantedTokenLevelEffect) {
  for (const std::string name : {"clean", "confounded"}) {
    SCOPED_TRACE(name);
    const Rejections r = count_rejections(name, 20, 0.5, name == "clean" ? 3000 : 4000);
    EXPECT_GE(r.clustered, 16u) << "power " << r.clustered << " / 20";
    std::printf("[dependent tokens] %s, effect 0.5: clustered %zu / 20\n", name.c_str(), r.clustered);
    if (test_util::long_tests())  // the power curve of docs/audit_validation.md
      for (double effect : {0.1, 0.2, 0.3}) {
        const Rejections w = count_rejections(name, 100, effect, name == "clean" ? 5000 : 6000);
        std::printf("[dependent tokens] %s, effect %.1f: clustered %zu / 100\n", name.c_str(), effect, w.clustered);
      }
  }
}

// Unequal documents (issue 54, item 2): one sequence holding 40 % of the tokens, per-sequence shifts in
// accuracy (correct_cluster_sd) and confidence, 8 to 100 sequences; and log-normal lengths. A 2-fold q̂
// whose half holding the long sequence is mostly that sequence shifted every short sequence of the other
// half by its accuracy: 9-18 % rejections at 5 % before the fold-centred contrast.
std::size_t dominant_rejections(const std::string& name, std::size_t sequences, double first_share,
                                double length_log_sd, std::size_t sets, std::uint64_t base, double effect = 0.0) {
  DiagnosticOptions d;
  d.permutations = 199;
  std::size_t rejected = 0;
  for (std::size_t k = 0; k < sets; ++k) {
    auto o = family(name, base + k);
    o.sequences = sequences;
    o.first_share = first_share;
    o.length_log_sd = length_log_sd;
    o.effect = effect;
    const auto sim = simulate_tokens(o);
    const auto c =
        clustered_residual_gap_test(sim.confidence, sim.correct, sim.statistic, sim.cluster, d, derive_seed(base, k));
    rejected += c.p <= 0.05;
  }
  return rejected;
}

TEST(DependentTokens, ClusteredDecisionTestHoldsItsLevelWithOneDominantSequence) {
  const std::size_t sets = test_util::long_tests() ? 400 : 100;
  const auto band = binomial_band_99(sets, 0.05);
  struct Case {
    const char* family;
    std::size_t sequences;
    double share, log_sd;
  };
  for (const Case c : {Case{"clean", 8, 0.4, 0}, Case{"clean", 12, 0.4, 0}, Case{"clean", 20, 0.4, 0},
                       Case{"clean", 100, 0.4, 0}, Case{"confounded", 20, 0.4, 0}, Case{"clean", 30, 0, 1.0}}) {
    SCOPED_TRACE(std::string(c.family) + ", " + std::to_string(c.sequences) + " sequences, first share " +
                 std::to_string(c.share));
    const std::size_t r =
        dominant_rejections(c.family, c.sequences, c.share, c.log_sd, sets, 7000 + 1000 * c.sequences);
    std::printf(
        "[dependent tokens] unequal, %s: %zu sequences, first share %.2f, log-sd %.1f: %zu / %zu (band [%zu, %zu])\n",
        c.family, c.sequences, c.share, c.log_sd, r, sets, band.first, band.second);
    EXPECT_GE(r, band.first);
    EXPECT_LE(r, band.second);
  }
}

TEST(DependentTokens, ClusteredDecisionTestFindsAnEffectBesideADominantSequence) {
  const std::size_t r = dominant_rejections("clean", 100, 0.4, 0, 20, 90000, 0.5);
  std::printf("[dependent tokens] unequal, 100 sequences, first share 0.40, effect 0.5: %zu / 20\n", r);
  EXPECT_GE(r, 16u);
  if (test_util::long_tests())
    for (double effect : {0.2, 0.3})
      std::printf("[dependent tokens] unequal, 100 sequences, first share 0.40, effect %.1f: %zu / 100\n", effect,
                  dominant_rejections("clean", 100, 0.4, 0, 100, 91000, effect));
}

TEST(DependentTokens, ClusterSplitsKeepEveryClusterWholeAndBalanced) {
  std::vector<std::int64_t> cluster;
  Rng rng(7);
  for (std::int64_t g = 0; g < 101; ++g)
    for (std::uint64_t t = 0, m = 1 + rng.below(40); t < m; ++t) cluster.push_back(1000 - 3 * g);  // sizes 1..40
  for (int k : {2, 5}) {
    const auto fold = cluster_kfold_assignment(cluster, k, 11);
    std::map<std::int64_t, std::set<int>> folds_of;
    std::vector<std::size_t> size(static_cast<std::size_t>(k), 0);
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      folds_of[cluster[i]].insert(fold[i]);
      ++size[static_cast<std::size_t>(fold[i])];
    }
    for (const auto& [id, f] : folds_of) EXPECT_EQ(f.size(), 1u) << "cluster " << id << " split across folds";
    const auto [lo, hi] = std::minmax_element(size.begin(), size.end());
    EXPECT_LE(*hi - *lo, 40u);  // at most the largest cluster
  }
  const std::vector<std::int64_t> labels(cluster.size(), 0);
  const auto halves = cross_fit_halves(labels, cluster, 3);
  std::set<std::int64_t> cal;
  for (std::size_t i : halves[0].calibration) cal.insert(cluster[i]);
  for (std::size_t i : halves[0].evaluation) EXPECT_EQ(cal.count(cluster[i]), 0u);
  EXPECT_EQ(halves[0].calibration, halves[1].evaluation);
  EXPECT_THROW(cluster_kfold_assignment(std::vector<std::int64_t>(10, 4), 2, 0), InputError);
  EXPECT_THROW(cluster_kfold_assignment(std::vector<std::int64_t>{0, -1}, 2, 0), InputError);
}

TEST(DependentTokens, TraceClustersReachTheAuditAndItsSubsampleKeepsThemWhole) {
  auto o = family("clean", 5);
  o.sequences = 40;
  o.length = 16;
  const auto sim = simulate_tokens(o);
  const auto run = make_audit_run_input(sim.trace, "tokens", {"routing_s"});
  ASSERT_EQ(run.cluster, sim.cluster);
  const auto cut = subsample_run(run, 100, 9);
  ASSERT_EQ(cut.cluster.size(), cut.confidence.size());
  EXPECT_EQ(cut.confidence.size(), 96u);  // six whole sequences of 16
  std::map<std::int64_t, int> count;
  for (auto c : cut.cluster) ++count[c];
  for (const auto& [c, k] : count) EXPECT_EQ(k, 16) << "cluster " << c;
  // The audit's diagnostic runs the clustered test on a clustered run.
  AuditOptions ao;
  ao.diagnostic.permutations = 99;
  ao.run_condcal = false;
  const auto res = run_audit({run}, ao);
  ASSERT_EQ(res.diagnostic.tests.size(), 1u);
  EXPECT_EQ(res.diagnostic.tests[0].result.clusters, 40u);
  EXPECT_EQ(res.verdict.dependence.variant, "clustered");
}

TEST(DependentTokens, OnlyCopiesInsideOneClusterCountAsDuplicates) {
  auto o = family("clean", 6);
  o.sequences = 30;
  o.length = 20;
  auto run = make_audit_run_input(simulate_tokens(o).trace, "tokens", {"routing_s"});
  // Row 0 of sequence 1 equal to row 0 of sequence 0 (two sequences that open alike): not a copy.
  auto copy_row = [&](std::size_t from, std::size_t to) {
    run.confidence[to] = run.confidence[from];
    run.correct[to] = run.correct[from];
    run.predictive_entropy[to] = run.predictive_entropy[from];
    run.labels[to] = run.labels[from];
    run.predicted[to] = run.predicted[from];
    std::copy_n(run.log_probs.begin() + long(from * run.classes), run.classes,
                run.log_probs.begin() + long(to * run.classes));
    const std::size_t P = run.profile_names.size();
    std::copy_n(run.profile.begin() + long(from * P), P, run.profile.begin() + long(to * P));
    for (auto& s : run.statistics) s[to] = s[from];
  };
  copy_row(0, 20);
  auto checked = std::vector<AuditRunInput>{run};
  EXPECT_EQ(check_integrity(checked, false).runs[0].duplicate_rows, 0u);
  // Row 3 copied into row 7 of the same sequence: a copy, counted, and dropped with its cluster id.
  copy_row(3, 7);
  checked = {run};
  const auto res = check_integrity(checked, true);
  EXPECT_EQ(res.runs[0].duplicate_rows, 1u);
  ASSERT_EQ(checked[0].cluster.size(), checked[0].confidence.size());
  EXPECT_EQ(checked[0].confidence.size(), 599u);
  EXPECT_EQ(checked[0].cluster[19], 1);  // row 20 (sequence 1) moved up by one
}

}  // namespace
}  // namespace arcal
