// The typed results contract (src/results): every audit result written by to_json reads back by
// from_json into the same values (write -> read -> write gives the same JSON), the stored verdict is its
// rule's, and the reader names what is wrong: another schema version ("re-run"), a value of the wrong
// type or a missing key (by JSON pointer). The consistency band is checked against exact binomial
// quantiles computed independently.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "audit/audit.hpp"
#include "audit/audit_pipeline.hpp"
#include "results/audit_files.hpp"
#include "audit/audit_test_util.hpp"
#include "calib/binning.hpp"
#include "core/error.hpp"
#include "results/json_fields.hpp"
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

/// The reader's error for a document ("no error" when it reads).
std::string read_error(const nlohmann::json& x, const std::string& path) {
  try {
    read_results(x.dump(), path);
  } catch (const InputError& e) {
    return std::string(e.what());
  }
  return std::string("no error");
}

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
  EXPECT_EQ(doc.audit.verdict.summary, make_verdict(res).summary);
}

// Every option of a full audit is recorded as it ran, one key per row of the option table (issue 57:
// a new option is recorded with no code in the writer or reader), and reads back into the same values.
TEST(ResultsJson, FullAuditRecordsEveryOptionAsItRan) {
  std::vector<AuditRunInput> runs;
  for (std::uint64_t s = 0; s < 2; ++s) runs.push_back(test_util::simulated_run(600, 0.0, 10 + s));
  FullAuditOptions o;
  o.permutations = 59;
  o.seed = 17;
  o.probes = false;
  o.bins = 12;
  o.null_group_size = 3;
  o.sensitivity_effects = {0.004, 0.01};
  o.smallest_effect = 0.007;
  const auto res = run_full_audit(runs, o);
  ASSERT_TRUE(res.has_settings);
  const nlohmann::json j = audit_results_json(res);
  ASSERT_TRUE(j.contains("options"));
  const auto& recorded = j.at("options");
  ASSERT_EQ(recorded.size(), audit_option_table().size());
  for (const auto& row : audit_option_table()) EXPECT_TRUE(recorded.contains(row.key)) << row.key;
  EXPECT_EQ(recorded.at("permutations"), 59);
  EXPECT_EQ(recorded.at("seed"), 17);
  EXPECT_EQ(recorded.at("probes"), false);
  EXPECT_EQ(recorded.at("bins"), 12);
  EXPECT_EQ(recorded.at("null_group_size"), 3);
  EXPECT_EQ(recorded.at("sensitivity_effects"), nlohmann::json({0.004, 0.01}));
  EXPECT_EQ(recorded.at("smallest_effect"), 0.007);
  // The diagnostic that ran used them (the record is what ran, not a copy of defaults).
  EXPECT_EQ(res.diagnostic.options.permutations, 59);
  EXPECT_EQ(res.diagnostic.options.bins, 12u);
  const auto doc = read_results(j.dump(1), "results.json");
  ASSERT_TRUE(doc.audit.has_settings);
  EXPECT_EQ(options_json(audit_option_table(), doc.audit.settings), recorded);
  EXPECT_EQ(options_hash(audit_option_table(), doc.audit.settings), options_hash(audit_option_table(), o));
  // An older results.json without the record still reads (has_settings false).
  nlohmann::json old = j;
  old.erase("options");
  EXPECT_FALSE(read_results(old.dump(), "results.json").audit.has_settings);
  // A recorded value of the wrong type is refused naming the option.
  nlohmann::json bad = j;
  bad["options"]["permutations"] = "many";
  EXPECT_NE(read_error(bad, "results.json").find("permutations"), std::string::npos) << read_error(bad, "results.json");
}

TEST(ResultsJson, StudySectionWithItsMetricsRoundTrips) {
  ResultsDocument doc;
  doc.audit = small_audit(0.0);
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

// The rule itself is tested in tests/audit/test_verdict.cpp; here: the stored verdict is make_verdict of
// the results it sits in, and the diagnostic decides when nothing else ran.
TEST(ResultsJson, StoredVerdictIsTheRulesOverTheResults) {
  const auto null = small_audit(0.0);
  EXPECT_EQ(null.verdict.dependence.test, "diagnostic.decision");
  EXPECT_EQ(null.verdict.summary, make_verdict(null).summary);
  EXPECT_EQ(null.verdict.answer, "not assessed");  // no probes: no gain interval
  const auto planted = small_audit(0.2);
  EXPECT_EQ(planted.verdict.dependence.status, "rejects") << planted.verdict.summary;
  EXPECT_LE(planted.verdict.dependence.p, 0.05);
  const auto back = read_results(audit_text(planted), "results.json");
  EXPECT_EQ(back.audit.verdict.summary, planted.verdict.summary);
  EXPECT_EQ(back.audit.verdict.dependence.p, planted.verdict.dependence.p);
}

TEST(ResultsJson, ReaderNamesVersionTypeAndMissingKey) {
  auto j = nlohmann::json::parse(audit_text(small_audit(0.0)));
  auto message = [](const nlohmann::json& x) { return read_error(x, "dir/results.json"); };
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

TEST(ResultsJson, IntegersOutOfRangeOrFractionalAreRefusedNamingThePointer) {
  // nlohmann casts 7.8e29 to int without a check (undefined behaviour; fuzz_results_json found it in a
  // calibration document's "bootstrap"); every integer field is now range-checked.
  auto j = nlohmann::json::parse(audit_text(small_audit(0.0)));
  auto message = [](const nlohmann::json& x) { return read_error(x, "r.json"); };
  auto huge = j;
  huge["runs"][0]["n"] = 7.8e29;
  EXPECT_NE(message(huge).find("/runs/0/n"), std::string::npos) << message(huge);
  EXPECT_NE(message(huge).find("must be an integer"), std::string::npos) << message(huge);
  auto negative = j;
  negative["runs"][0]["n"] = -3;
  EXPECT_NE(message(negative).find("/runs/0/n"), std::string::npos) << message(negative);
  auto fractional = j;
  fractional["runs"][0]["n"] = 2.5;
  EXPECT_NE(message(fractional).find("must be an integer"), std::string::npos) << message(fractional);
  auto whole = j;  // an integral float is an integer
  whole["runs"][0]["n"] = static_cast<double>(j["runs"][0]["n"].get<std::size_t>());
  EXPECT_EQ(message(whole), "no error");
  EXPECT_EQ(results::integer_value<int>(nlohmann::json(2147483647.0)), 2147483647);
  EXPECT_THROW(results::integer_value<int>(nlohmann::json(2147483648.0)), nlohmann::json::type_error);
  EXPECT_THROW(results::integer_value<std::uint64_t>(nlohmann::json(18446744073709551616.0)),
               nlohmann::json::type_error);
  EXPECT_THROW(results::integer_value<std::int64_t>(nlohmann::json(std::numeric_limits<std::uint64_t>::max())),
               nlohmann::json::type_error);
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
