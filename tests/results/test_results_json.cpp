// The typed results contract (src/results): every audit result written by to_json reads back by
// from_json into the same values (write -> read -> write gives the same JSON), the verdict follows its
// rule, and the reader names what is wrong: another schema version ("re-run"), a value of the wrong
// type or a missing key (by JSON pointer). The consistency band is checked against exact binomial
// quantiles computed independently.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "audit/audit.hpp"
#include "audit/audit_test_util.hpp"
#include "calib/binning.hpp"
#include "core/error.hpp"
#include "results/read.hpp"
#include "audit/simulate.hpp"
#include "calib/metrics.hpp"
#include "io/trace.hpp"
#include "stats/paired_tests.hpp"

namespace arcal {
namespace {

AuditResults small_audit(double effect) {
  std::vector<AuditRunInput> runs;
  for (std::uint64_t s = 0; s < 3; ++s) {
    auto r = test_util::simulated_run(1200, effect, s);
    r.cell = "sim";
    runs.push_back(r);
  }
  AuditOptions o;
  o.diagnostic.permutations = 99;
  return run_audit(runs, o);
}

std::string audit_text(const AuditResults& r) { return audit_results_json(r).dump(1); }

TEST(ResultsJson, AuditRoundTripsThroughTheTypedReader) {
  const auto res = small_audit(0.0);
  const std::string text = audit_text(res);
  const auto doc = read_results(text, "results.json");
  EXPECT_EQ(doc.audit.diagnostic.tests.size(), res.diagnostic.tests.size());
  ASSERT_FALSE(doc.audit.run_summaries.empty());
  EXPECT_EQ(doc.audit.run_summaries[0].reliability.size(), res.run_summaries[0].reliability.size());
  EXPECT_EQ(doc.audit.condcal.size(), res.condcal.size());
  // Write -> read -> write is the identity on the JSON (every key the writer emits is read back).
  EXPECT_EQ(nlohmann::json::parse(results_text(doc)), nlohmann::json::parse(text));
  EXPECT_EQ(doc.verdict.summary, make_verdict(res).summary);
}

TEST(ResultsJson, StudySectionWithItsMetricsRoundTrips) {
  ResultsDocument doc;
  doc.audit = small_audit(0.0);
  doc.verdict = make_verdict(doc.audit);
  doc.has_study = true;
  doc.study.name = "s";
  doc.study.split = "test";
  SimulationOptions so;
  so.n = 800;
  const auto sim = simulate_trace(so);
  StudyRunResult r;
  r.id = "run";
  r.model = "ar-vit-tiny";
  r.residual = "full";
  r.seed = 3;
  ReportOptions ro;
  ro.draws = 50;
  r.metrics = calibration_report(trace_probabilities(sim.trace), sim.trace.n, sim.trace.classes, sim.trace.labels, ro);
  doc.study.runs = {r, r};
  doc.study.runs[1].residual = "standard";
  doc.study.groups = summarise_groups(doc.study.runs);
  const std::string text = results_text(doc);
  const auto back = read_results(text, "results.json");
  ASSERT_TRUE(back.has_study);
  EXPECT_EQ(back.study.groups.size(), 2u);
  EXPECT_EQ(back.study.runs[0].metrics.reliability.size(), r.metrics.reliability.size());
  // Every key of the metrics object, its intervals, bias corrections and consistency p included.
  EXPECT_EQ(nlohmann::json::parse(results_text(back)), nlohmann::json::parse(text));
}

TEST(ResultsJson, VerdictFollowsItsRule) {
  // Without probes, sensitivity or exact null the diagnostic is the evidence: no effect -> "not assessed".
  const auto null = make_verdict(small_audit(0.0));
  EXPECT_EQ(null.primary.test, "diagnostic");
  if (null.primary.p > 0.05) {
    EXPECT_EQ(null.answer, "not assessed");
    EXPECT_NE(null.summary.find("--sensitivity"), std::string::npos) << null.summary;
  }
  // A large planted effect is found by the diagnostic's Holm-adjusted p.
  const auto planted = make_verdict(small_audit(0.2));
  EXPECT_EQ(planted.answer, "present") << planted.summary;
  EXPECT_LE(planted.primary.p, 0.05);
  EXPECT_EQ(planted.summary.rfind("Yes", 0), 0u) << planted.summary;
  // Sensitivity decides absent vs undetected on the lower end of R's interval.
  AuditResults r = small_audit(0.0);
  r.has_sensitivity = true;
  r.sensitivity.threshold = 0.5;
  r.sensitivity.threshold_effect = 0.01;
  r.sensitivity.verdicts = {{"full_vector", 0.8, {0.6, 0.9}, "absent"}};
  auto v = make_verdict(r);
  if (v.primary.p > 0.05) EXPECT_EQ(v.answer, "absent") << v.summary;
  r.sensitivity.verdicts = {{"full_vector", 0.8, {0.4, 0.9}, "not detected"}};
  v = make_verdict(r);
  if (v.primary.p > 0.05) EXPECT_EQ(v.answer, "undetected") << v.summary;
  // The exact null decides when it ran; a rejection without a gain over the control is "weak".
  r.has_exact_null = true;
  r.exact_null.replicates = 99;
  r.exact_null.pooled = {{"confidence", "full_vector_vs_capacity_matched", -0.0002, -0.001, 0.0, 0.03, 3, {}}};
  v = make_verdict(r);
  EXPECT_EQ(v.primary.test, "exact_null.conditional_permutation");
  EXPECT_EQ(v.answer, "weak") << v.summary;
  r.exact_null.pooled[0].real_mean_gain = 0.002;
  EXPECT_EQ(make_verdict(r).answer, "present");
  r.exact_null.pooled[0].p = 0.2;
  EXPECT_EQ(make_verdict(r).answer, "undetected");  // the sensitivity bound above still reads "not detected"
}

TEST(ResultsJson, ReaderNamesVersionTypeAndMissingKey) {
  auto j = nlohmann::json::parse(audit_text(small_audit(0.0)));
  auto message = [](const nlohmann::json& x) {
    try {
      read_results(x.dump(), "dir/results.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto old = j;
  old["schema"] = "arcal.audit/1";
  EXPECT_NE(message(old).find("version 1"), std::string::npos) << message(old);
  EXPECT_NE(message(old).find("re-run arcal audit"), std::string::npos);
  auto wrong = j;
  wrong["diagnostic"]["tests"][0]["p"] = "small";
  EXPECT_NE(message(wrong).find("/diagnostic/tests/0/p"), std::string::npos) << message(wrong);
  EXPECT_NE(message(wrong).find("dir/results.json"), std::string::npos);
  auto missing = j;
  missing["diagnostic"].erase("alpha");
  EXPECT_NE(message(missing).find("alpha"), std::string::npos) << message(missing);
  EXPECT_NE(message(missing).find("/diagnostic"), std::string::npos) << message(missing);
  auto no_verdict = j;
  no_verdict.erase("verdict");
  EXPECT_NE(message(no_verdict).find("verdict"), std::string::npos) << message(no_verdict);
}

TEST(ResultsJson, ConsistencyBandIsTheExactBinomialCentralInterval) {
  for (std::size_t n : {1u, 7u, 30u, 400u, 5000u})
    for (double c : {0.05, 0.3, 0.5, 0.93}) {
      const auto b = calibrated_accuracy_band(n, c);
      // Independent definition: lo = min k with P(X <= k) >= 0.025, hi = min k with P(X <= k) >= 0.975.
      std::size_t lo = 0, hi = 0;
      while (binomial_cdf(lo, n, c) < 0.025) ++lo;
      while (binomial_cdf(hi, n, c) < 0.975) ++hi;
      EXPECT_DOUBLE_EQ(b.low, double(lo) / double(n)) << n << " " << c;
      EXPECT_DOUBLE_EQ(b.high, double(hi) / double(n)) << n << " " << c;
    }
  EXPECT_TRUE(std::isnan(calibrated_accuracy_band(0, 0.5).low));
}

}  // namespace
}  // namespace arcal
