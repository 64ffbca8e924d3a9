// The probe audit (audit/probes.hpp) on simulated traces: under the exact null the per-run test
// calls the full-vector MLP better than a control (linear included) at most at its nominal rate and
// covers 0 against the routing controls at 95 %; with an injected 0.02-nat routing effect the routing
// probes beat every control on log-loss; the family wires into results.json and probes.csv; bad input
// throws. ARCAL_LONG_TESTS=1 adds the 80-run null check and the 10-run detection check at N = 10,000.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <filesystem>
#include <fstream>

#include "ops/blas.hpp"
#include "audit/run_input.hpp"
#include "results/audit_files.hpp"
#include "audit/simulate.hpp"
#include "../audit/audit_test_util.hpp"
#include "audit/probes.hpp"
#include "calib/calibrators.hpp"
#include "core/error.hpp"
#include "stats/paired_tests.hpp"

using namespace arcal;
using arcal::test_util::long_tests;
using arcal::test_util::simulated_run;

namespace {

const RunComparison& comparison(const RunProbeResult& r, const std::string& name) {
  for (const auto& c : r.comparisons)
    if (c.name == name) return c;
  throw std::runtime_error("missing comparison " + name);
}

/// Exact-null behaviour of the per-run tests over `runs` simulations (seeds seed0 ..): the routing
/// profile carries nothing, so the full-vector probe must not be declared better than any control
/// (its interval entirely below 0) in more than the nominal 2.5 % of runs, the linear baseline
/// included (the simulated truth is logistic in logit c, so Platt is correctly specified), and its
/// interval must cover 0 against the three routing controls at the nominal 95 %. The example-level
/// bootstrap this replaced, conditional on the fitted probes, called the probe better than its
/// shuffled control in 12 % and than linear in 20 % of null runs (issue 17): the refit's variability
/// belongs in the per-run test, which now comes from repeated cross-fits with the Nadeau-Bengio
/// correction.
void null_coverage(std::size_t runs, std::size_t n, int repeats, std::uint64_t seed0) {
  arcal::set_blas_threads(1);
  ProbeAuditOptions o;
  o.repeats = repeats;
  if (const char* e = std::getenv("ARCAL_PROBE_CORRECTIONS")) o.corrections = std::string(e) != "0";
  const std::array<const char*, 4> names{"full_vector_vs_capacity_matched", "full_vector_vs_shuffled_global",
                                         "full_vector_vs_shuffled_within_bins", "full_vector_vs_linear"};
  std::array<std::size_t, 4> cover{}, false_gain{};
  std::array<double, 4> sum_delta{}, sum_width{};
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t r = 0; r < runs; ++r) {
    const auto run = simulated_run(n, 0.0, seed0 + r);
    o.seed = seed0 + r;
    const auto res = run_probes(run, 0, o);
    for (std::size_t k = 0; k < names.size(); ++k) {
      const auto& c = comparison(res, names[k]).log_loss;
      cover[k] += c.ci.low <= 0 && 0 <= c.ci.high;
      false_gain[k] += c.ci.high < 0;
      sum_delta[k] += c.delta;
      sum_width[k] += c.ci.high - c.ci.low;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  exact null, %zu runs (seeds %llu..) at N = %zu, %d repeats, corrections %d, %.1f s:\n", runs,
              static_cast<unsigned long long>(seed0), n, repeats, int(o.corrections), secs);
  for (std::size_t k = 0; k < names.size(); ++k)
    std::printf("    %-38s log-loss CI covers 0 in %zu/%zu, false gains %zu, mean delta %+.5f, mean CI width %.5f\n",
                names[k], cover[k], runs, false_gain[k], sum_delta[k] / double(runs), sum_width[k] / double(runs));
  // 99 % binomial bands: false gains at most the upper end for p = 0.025, coverage of the three
  // routing-null comparisons at least the lower end for p = 0.95.
  const auto gains = arcal::test_util::binomial_band_99(runs, 0.025);
  const auto covers = arcal::test_util::binomial_band_99(runs, 0.95);
  for (std::size_t k = 0; k < names.size(); ++k) {
    EXPECT_LE(false_gain[k], gains.second) << names[k];
    if (k < 3) {
      EXPECT_GE(cover[k], covers.first) << names[k];
    }
  }
}

/// The injected-effect check over `runs` simulations: every routing probe's log-loss interval lies
/// below 0 against every control, in every run.
void injected_detection(std::size_t runs, std::size_t n, double effect, int repeats, std::uint64_t seed0) {
  arcal::set_blas_threads(1);
  ProbeAuditOptions o;
  o.repeats = repeats;
  if (const char* e = std::getenv("ARCAL_PROBE_CORRECTIONS")) o.corrections = std::string(e) != "0";
  const std::array<const char*, 5> names{"full_vector_vs_capacity_matched", "full_vector_vs_shuffled_global",
                                         "full_vector_vs_shuffled_within_bins", "full_vector_vs_linear",
                                         "full_logit_routing_vs_full_logit"};
  std::array<std::size_t, 5> beat{};
  std::array<double, 5> sum_delta{}, max_high{};
  max_high.fill(-1.0);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t r = 0; r < runs; ++r) {
    const auto run = simulated_run(n, effect, seed0 + r);
    o.seed = seed0 + r;
    const auto res = run_probes(run, 0, o);
    for (std::size_t k = 0; k < names.size(); ++k) {
      const auto& c = comparison(res, names[k]).log_loss;
      beat[k] += c.ci.high < 0;
      sum_delta[k] += c.delta;
      max_high[k] = std::max(max_high[k], c.ci.high);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  injected %.3f nats, %zu runs (seeds %llu..) at N = %zu, %d repeats, corrections %d, %.1f s:\n", effect,
              runs, static_cast<unsigned long long>(seed0), n, repeats, int(o.corrections), secs);
  for (std::size_t k = 0; k < names.size(); ++k) {
    std::printf("    %-38s interval below 0 in %zu/%zu, mean delta %+.5f, largest upper end %+.5f\n", names[k], beat[k],
                runs, sum_delta[k] / double(runs), max_high[k]);
    EXPECT_EQ(beat[k], runs) << names[k];
  }
}

}  // namespace

TEST(Probes, NullGainIntervalCoversZero) { null_coverage(40, 2000, 5, 500); }

TEST(Probes, LongNullGainIntervalCoversZero) {
  if (!long_tests()) GTEST_SKIP() << "set ARCAL_LONG_TESTS=1 (ctest -L long)";
  // The validation of docs/audit_validation.md: `arcal simulate --n 10000 --classes 10 --seed S`,
  // S = 0..79, the audit's 5 repeated cross-fits.
  null_coverage(80, 10000, 5, 0);
}

TEST(Probes, LongInjectedEffectBeatsEveryControl) {
  if (!long_tests()) GTEST_SKIP() << "set ARCAL_LONG_TESTS=1 (ctest -L long)";
  injected_detection(10, 10000, 0.02, 5, 0);
}

TEST(Probes, InjectedEffectBeatsEveryControl) {
  arcal::set_blas_threads(1);
  const auto run = simulated_run(10000, 0.02, 77);
  ProbeAuditOptions o;
  o.seed = 77;
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = run_probes(run, 0, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(res.probes.size(), kProbeNames.size());
  for (const auto& p : res.probes)
    std::printf("  %-22s inputs %2zu params %5lld log-loss %.5f Brier %.5f ECE %.4f epochs %.1f\n", p.name.c_str(),
                p.inputs, static_cast<long long>(p.parameters), p.scores.log_loss, p.scores.brier, p.scores.ece,
                p.mean_epochs);
  for (const auto& c : res.comparisons)
    std::printf("  %-40s log-loss delta %+.5f [%+.5f, %+.5f]\n", c.name.c_str(), c.log_loss.delta, c.log_loss.ci.low,
                c.log_loss.ci.high);
  std::printf("  one run, N = 10000, 5 repeats: %.1f s\n", secs);
  for (const char* name :
       {"full_vector_vs_capacity_matched", "full_vector_vs_shuffled_global", "full_vector_vs_shuffled_within_bins",
        "full_vector_vs_linear", "full_logit_routing_vs_full_logit"})
    EXPECT_LT(comparison(res, name).log_loss.ci.high, 0.0) << name;
  // Capacity matching: the control on (logit c, class) within 2 % of the full-vector MLP.
  std::int64_t full = 0, matched = 0;
  for (const auto& p : res.probes) {
    if (p.name == "full_vector") full = p.parameters;
    if (p.name == "capacity_matched") matched = p.parameters;
  }
  EXPECT_LE(std::abs(double(full - matched)) / double(full), 0.02);
  EXPECT_EQ(full, mlp_parameter_count(int(1 + run.classes + run.profile_names.size()), 64, 64));
}

/// Dependent tokens (method.md §6.9, issue 27): routing and correctness both correlated inside a
/// sequence, routing carrying nothing beyond c. With the cross-fit halves over whole sequences the
/// per-run test calls the full-vector probe better than its capacity-matched and shuffled controls at
/// most at the nominal 2.5 %.
TEST(Probes, DependentTokensGiveNoFalseGainsWithClusterSplits) {
  arcal::set_blas_threads(1);
  const std::size_t runs = long_tests() ? 40 : 12;
  ProbeAuditOptions o;
  o.repeats = 5;
  const std::array<const char*, 3> names{"full_vector_vs_capacity_matched", "full_vector_vs_shuffled_global",
                                         "full_vector_vs_shuffled_within_bins"};
  // Equal sequences, and (issue 54) one sequence holding 40 % of the tokens beside 39 others.
  for (const double first_share : {0.0, 0.4}) {
    std::array<std::size_t, 3> false_gain{};
    for (std::size_t r = 0; r < runs; ++r) {
      TokenSimulationOptions so;
      so.sequences = first_share > 0 ? 40 : 64;
      so.length = 32;
      so.first_share = first_share;
      so.seed = 7000 + r;
      const auto run = make_audit_run_input(simulate_tokens(so).trace, "tokens" + std::to_string(r), {"routing_s"});
      ASSERT_EQ(run.cluster.size(), run.confidence.size());
      o.seed = 7000 + r;
      const auto res = run_probes(run, 0, o);
      for (std::size_t k = 0; k < names.size(); ++k) false_gain[k] += comparison(res, names[k]).log_loss.ci.high < 0;
    }
    const auto band = arcal::test_util::binomial_band_99(runs, 0.025);
    for (std::size_t k = 0; k < names.size(); ++k) {
      std::printf("  dependent tokens, first share %.1f, %zu runs: %-38s false gains %zu (band [0, %zu])\n",
                  first_share, runs, names[k], false_gain[k], band.second);
      EXPECT_LE(false_gain[k], band.second) << names[k] << ", first share " << first_share;
    }
  }
}

TEST(Probes, UnequalClustersSplitIntoHalvesOfTheirOwnSize) {
  // Token traces of real text: documents of unequal length. Twenty 100-row clusters and one singleton
  // (the reproducer of issue 54): whole-cluster halves differ in size between the repeated cross-fits,
  // and every repeat is fitted on its own halves (this threw "replicate 2's halves differ in size").
  arcal::set_blas_threads(1);
  auto run = simulated_run(2001, 0.0, 11);
  run.cluster.resize(run.confidence.size());
  for (std::size_t i = 0; i < run.cluster.size(); ++i)
    run.cluster[i] = std::int64_t(std::min<std::size_t>(i / 100, 20));
  ProbeAuditOptions o;
  o.repeats = 5;
  o.mlp.max_epochs = 20;
  o.seed = 3;
  const auto res = run_probes(run, 0, o);
  ASSERT_FALSE(res.comparisons.empty());
  for (const auto& c : res.comparisons) {
    EXPECT_TRUE(std::isfinite(c.log_loss.delta)) << c.name;
    EXPECT_EQ(c.log_loss.split_deltas.size(), 10u) << c.name;  // 5 repeats x 2 folds
  }
}

TEST(Probes, FamilyWritesResultsJsonAndCsv) {
  arcal::set_blas_threads(1);
  std::vector<AuditRunInput> runs{simulated_run(600, 0.0, 1), simulated_run(600, 0.0, 2)};
  ProbeAuditOptions o;
  o.repeats = 2;
  o.mlp.max_epochs = 5;
  AuditResults res;
  res.options.run_condcal = false;
  res.probes = run_probe_family(runs, o);
  res.has_probes = true;
  res.verdict = make_verdict(res);
  ASSERT_EQ(res.probes.runs.size(), 2u);
  EXPECT_EQ(res.probes.tests.size(), kProbeComparisons.size() * kProbeMetrics.size());
  const auto j = audit_results_json(res);
  ASSERT_TRUE(j.contains("probes"));
  EXPECT_EQ(j["probes"]["runs"].size(), 2u);
  EXPECT_TRUE(j["probes"]["runs"][0]["probes"].contains("full_logit_routing"));
  EXPECT_EQ(j["probes"]["runs"][0]["comparisons"].size(), kProbeComparisons.size());
  EXPECT_EQ(j["probes"]["tests"][0]["gains"].size(), 2u);
  // One sign for one quantity (issue 23): the probe family's gain is the verdict's gain.
  ASSERT_EQ(j["probes"]["tests"][0]["comparison"], "full_vector_vs_capacity_matched");
  ASSERT_EQ(j["probes"]["tests"][0]["metric"], "log_loss");
  EXPECT_EQ(j["probes"]["tests"][0]["mean_gain"], -res.probes.tests[0].mean_delta);
  EXPECT_EQ(j["probes"]["tests"][0]["mean_gain"], j["verdict"]["primary"]["effect"]);
  EXPECT_EQ(j["probes"]["tests"][0]["ci"][0], j["verdict"]["primary"]["effect_ci"][0]);
  EXPECT_EQ(j["probes"]["runs"][0]["profile"].size(), runs[0].profile_names.size());
  const auto dir = std::filesystem::temp_directory_path() / "arcal_probe_family_test";
  std::filesystem::remove_all(dir);
  write_audit_results(res, dir.string());
  std::ifstream csv(dir / "probes.csv");
  std::string header, line;
  std::getline(csv, header);
  std::size_t rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(header.rfind("run,cell,probe,", 0), 0u);
  EXPECT_EQ(rows, 2 * kProbeNames.size());
  EXPECT_TRUE(std::filesystem::exists(dir / "probe_comparisons.csv"));
  std::filesystem::remove_all(dir);
}

TEST(Probes, RejectsBadInput) {
  ProbeAuditOptions o;
  auto run = simulated_run(200, 0.0, 3);
  auto bad = run;
  bad.profile.pop_back();
  EXPECT_THROW(run_probes(bad, 0, o), InputError);
  bad = run;
  const std::size_t P = run.profile_names.size();
  for (std::size_t i = 0; i < run.confidence.size(); ++i) bad.profile[i * P] = 0.5;  // constant column
  EXPECT_THROW(run_probes(bad, 0, o), InputError);
  bad = run;
  bad.log_probs[7] = std::nan("");
  EXPECT_THROW(run_probes(bad, 0, o), InputError);
  bad = run;
  bad.profile_names.clear();
  EXPECT_THROW(run_probes(bad, 0, o), InputError);
  o.only = {"no_such_probe"};
  EXPECT_THROW(run_probes(run, 0, o), InputError);
  o.only = {"linear"};
  EXPECT_THROW(run_probe_family({run}, o), InputError);  // the family needs every probe
}

namespace {

/// A class-dependent or saturated null run (docs/audit_validation.md families): routing tracks the
/// predicted class (or confidence) and carries nothing beyond the whole output vector.
AuditRunInput family_run(const std::string& family, std::size_t n, std::uint64_t seed) {
  SimulationOptions so;
  so.n = n;
  so.seed = seed;
  so.confound = 0.9;
  if (family == "class-dependent") {
    so.confound_source = "class";
    so.class_effect = 1.5;
  } else {
    so.margin_mean = 14.0;
    so.margin_sd = 4.0;
    so.reference_slope = 0.5;
  }
  return make_audit_run_input(simulate_trace(so).trace, family + std::to_string(seed), {"re"});
}

/// Per-predicted-class Platt scaling on logit c, on the design's splits, scored like the probes: the
/// least a reference that conditions on the outputs must express (method.md §6.3).
double per_class_platt_log_loss(const AuditRunInput& run, const ProbeDesign& d) {
  double total = 0.0;
  std::size_t splits = 0;
  for (const auto& rep : d.repeats)
    for (const auto& s : rep) {
      std::vector<double> est(s.evaluation.size());
      for (std::size_t k = 0; k < run.classes; ++k) {
        std::vector<double> c, y, ce;
        for (auto i : s.calibration)
          if (std::size_t(run.predicted[i]) == k) {
            c.push_back(run.confidence[i]);
            y.push_back(run.correct[i]);
          }
        std::vector<std::size_t> at;
        for (std::size_t r = 0; r < s.evaluation.size(); ++r)
          if (std::size_t(run.predicted[s.evaluation[r]]) == k) {
            at.push_back(r);
            ce.push_back(run.confidence[s.evaluation[r]]);
          }
        if (at.empty()) continue;
        const auto p = apply_platt(fit_platt(c, y), ce);
        for (std::size_t r = 0; r < at.size(); ++r) est[at[r]] = std::min(std::max(p[r], 1e-6), 1.0 - 1e-6);
      }
      std::vector<double> ye;
      for (auto i : s.evaluation) ye.push_back(run.correct[i]);
      total += score_half(est, ye).log_loss;
      ++splits;
    }
  return total / double(splits);
}

}  // namespace

// Issue 23 (3): with routing that tracks the predicted class and class-dependent calibration (and with
// saturated confidences), "full logit + routing vs full logit" called routing a gain in 13/16 null runs
// when the reference read sorted probabilities on a linear scale. The reference now sees the predicted
// class on the log scale: it is at least as good as per-class Platt, and the comparison stays quiet.
TEST(Probes, FullLogitReferenceConditionsOnThePredictedClass) {
  arcal::set_blas_threads(1);
  ProbeAuditOptions o;
  o.repeats = 2;
  std::size_t false_gains = 0, runs = 0;
  for (const char* family : {"class-dependent", "saturated"})
    for (std::uint64_t s = 0; s < 4; ++s) {
      const auto run = family_run(family, 3000, 40 + s);
      o.seed = s;
      const auto res = run_probes(run, 0, o);
      const auto d = make_probe_design(run, 0, o);
      double full_logit = NAN;
      for (const auto& p : res.probes)
        if (p.name == "full_logit") full_logit = p.scores.log_loss;
      const double platt = per_class_platt_log_loss(run, d);
      std::printf("  %s seed %llu: full_logit %.4f, per-class Platt %.4f\n", family, (unsigned long long)s, full_logit,
                  platt);
      EXPECT_LE(full_logit, platt + 0.004) << family << " seed " << s;
      const auto& c = comparison(res, "full_logit_routing_vs_full_logit").log_loss;
      false_gains += c.p <= 0.05 && c.delta < 0;
      ++runs;
    }
  std::printf("  full logit + routing vs full logit: %zu false gains in %zu null runs\n", false_gains, runs);
  // At most 2 of 8 (the 99 % band of a one-sided 2.5 % rate over 8 runs is [0, 2]); the old reference: ~6.
  EXPECT_LE(false_gains, test_util::binomial_band_99(runs, 0.025).second) << false_gains << " of " << runs;
}

// Issue 54 (4): an effect confined to one predicted class. The full-vector probe on (logit c, profile)
// recovered about a fifth of it (a 0.02-0.025 nat effect answered "negligible" over 3 runs x 3,000);
// reading the predicted class it finds it, and so does the full-logit probe with routing.
TEST(Probes, PrimaryProbeFindsAnEffectConfinedToOneClass) {
  arcal::set_blas_threads(1);
  SimulationOptions so;
  so.n = 10000;
  so.effect_nats = 0.02;
  so.effect_class = 0;
  so.seed = 54;
  const auto run = make_audit_run_input(simulate_trace(so).trace, "one-class", {"re"});
  ProbeAuditOptions o;
  o.seed = 54;
  const auto res = run_probes(run, 0, o);
  for (const char* name :
       {"full_vector_vs_capacity_matched", "full_vector_vs_shuffled_global", "full_logit_routing_vs_full_logit"}) {
    const auto& c = comparison(res, name).log_loss;
    std::printf("  %-36s gain %+.5f [%+.5f, %+.5f]\n", name, -c.delta, -c.ci.high, -c.ci.low);
    EXPECT_LT(c.ci.high, 0.0) << name;  // probe better than control: the gain's interval above 0
    // The primary probe's whole interval above the smallest effect of interest (0.005 nats): the probe
    // without the class gained +0.0016 [+0.0000, +0.0031] here, 8 % of the effect.
    if (std::string(name).rfind("full_vector", 0) == 0) {
      EXPECT_GT(-c.ci.high, 0.005) << name;
    }
  }
}

// The other side of issue 54 (4): routing that tracks the predicted class, whose calibration differs by
// class, carries nothing beyond (confidence, class). The primary probe reads the class, and so does its
// control (both correct per-class Platt scaling), so a class-dependent calibration is not a routing gain.
// Without the class in the control, 8 of these 8 null runs gave the full-vector probe a gain.
TEST(Probes, ClassDependentCalibrationIsNotARoutingGain) {
  arcal::set_blas_threads(1);
  ProbeAuditOptions o;
  o.repeats = 2;
  std::size_t false_gains = 0, runs = 0;
  for (std::uint64_t s = 0; s < 8; ++s) {
    const auto run = family_run("class-dependent", 3000, 140 + s);
    o.seed = s;
    const auto res = run_probes(run, 0, o);
    const auto& c = comparison(res, "full_vector_vs_capacity_matched").log_loss;
    false_gains += c.p <= 0.05 && c.delta < 0;
    ++runs;
  }
  std::printf("  full vector vs capacity matched on class-dependent nulls: %zu false gains in %zu runs\n", false_gains,
              runs);
  EXPECT_LE(false_gains, test_util::binomial_band_99(runs, 0.025).second) << false_gains << " of " << runs;
}
