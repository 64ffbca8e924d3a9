// The report of a classifier without routing (issue 25): the JSON of `arcal metrics --json` and `arcal
// calibrate --json` reads back into a calibration document (and writes back to the same object), other
// schemas are refused naming the three that are read, and the document's report says "rejected" exactly
// when the consistency test rejects, shows the values the document holds, and warns of a calibrator fit
// that did not converge.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "calib/metrics.hpp"
#include "calib/report_json.hpp"
#include "core/error.hpp"
#include "report/format.hpp"
#include "report/sections.hpp"
#include "results/read.hpp"

using namespace arcal;

namespace {

/// N predictions over K classes whose labels are drawn from probabilities sharpened by `temp` < 1
/// (the model is then under-confident) or = 1 (calibrated).
CalibrationReport simulated(std::size_t n, std::size_t k, double temp, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> z(0.0, 1.5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> p(n * k);
  std::vector<std::int64_t> y(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::vector<double> logit(k), truth(k);
    double s = 0, st = 0;
    for (std::size_t c = 0; c < k; ++c) logit[c] = z(g);
    for (std::size_t c = 0; c < k; ++c) s += (p[i * k + c] = std::exp(logit[c]));
    for (std::size_t c = 0; c < k; ++c) p[i * k + c] /= s;
    for (std::size_t c = 0; c < k; ++c) st += (truth[c] = std::exp(logit[c] / temp));
    double r = u(g) * st, acc = 0;
    y[i] = static_cast<std::int64_t>(k - 1);
    for (std::size_t c = 0; c < k; ++c)
      if ((acc += truth[c]) >= r) {
        y[i] = static_cast<std::int64_t>(c);
        break;
      }
  }
  ReportOptions o;
  o.draws = 200;
  o.seed = seed;
  return calibration_report(p, n, k, y, o);
}

const report::Table* find_table(const report::Document& d, const std::string& first_header) {
  for (const auto& s : d.sections)
    for (const auto& b : s.blocks)
      if (b.kind == report::Block::table && !b.t.header.empty() && b.t.header[0] == first_header) return &b.t;
  return nullptr;
}

std::string verdict_of(const report::Document& d) {
  for (const auto& b : d.sections.front().blocks)
    if (b.kind == report::Block::verdict) return b.body;
  return "";
}

std::string all_text(const report::Document& d) {
  std::string s;
  for (const auto& sec : d.sections)
    for (const auto& b : sec.blocks) s += b.body + "\n";
  return s;
}

report::Document document(const ResultsDocument& doc) {
  static report::Figures figures("");  // a dry run: nothing is drawn
  report::Context c{doc, "m.json", figures, {}, {}};
  return report::build_document(c);
}

}  // namespace

TEST(CalibrationReport, MetricsJsonReadsBackAndWritesTheSameObject) {
  const auto r = simulated(3000, 4, 0.6, 1);
  nlohmann::json j = calibration_report_json(r);
  j["file"] = "runs/a/test.npz";
  const ResultsDocument doc = read_results(j.dump(), "m.json");
  ASSERT_EQ(doc.kind, ResultsDocument::Kind::metrics);
  EXPECT_EQ(doc.calibration.file, "runs/a/test.npz");
  EXPECT_EQ(doc.calibration.before.n, 3000u);
  EXPECT_DOUBLE_EQ(doc.calibration.before.ece.value, r.ece.value);
  EXPECT_EQ(nlohmann::json::parse(results_text(doc)), j);
}

TEST(CalibrationReport, VerdictFollowsTheConsistencyTestAndTablesHoldTheDocument) {
  for (const double temp : {0.6, 1.0}) {
    const auto r = simulated(4000, 4, temp, 7);
    ResultsDocument doc;
    doc.kind = ResultsDocument::Kind::metrics;
    doc.calibration.file = "t.npz";
    doc.calibration.before = r;
    const auto d = document(doc);
    const bool rejected = r.consistency_p < 0.05;
    EXPECT_EQ(rejected, temp != 1.0) << "the simulated model at temperature " << temp;
    const std::string v = verdict_of(d);
    EXPECT_NE(v.find(rejected ? "is rejected" : "is not rejected"), std::string::npos) << v;
    const auto* t = find_table(d, "metric");
    ASSERT_NE(t, nullptr);
    bool ece_row = false;
    for (const auto& row : t->rows)
      if (row[0] == "ECE") {
        ece_row = true;
        // The headline is the plug-in value (netcal's, torchmetrics', relplot's), the corrected one beside it.
        EXPECT_EQ(row[1], report::f4(r.ece.value));
        EXPECT_EQ(row[2], report::f4(r.ece.bias_corrected));
        EXPECT_EQ(row[3], report::ci(r.ece.ci));
      }
    EXPECT_TRUE(ece_row);
    const auto* bins = find_table(d, "bin");
    ASSERT_NE(bins, nullptr);
    std::size_t total = 0;
    for (const auto& row : bins->rows) {
      total += std::stoul(row[1]);
      const auto comma = row[4].find(',');
      const double lo = std::stod(row[4].substr(1, comma - 1)), hi = std::stod(row[4].substr(comma + 2));
      EXPECT_LE(lo, hi);
      EXPECT_LE(lo, std::stod(row[2]) + 1e-4);  // the band covers the bin's own confidence
      EXPECT_GE(hi, std::stod(row[2]) - 1e-4);
    }
    EXPECT_EQ(total, 4000u);  // every example in one non-empty bin
  }
}

TEST(CalibrationReport, CalibrateJsonShowsBeforeAfterAndWarnsOfAFitThatDidNotConverge) {
  const auto before = simulated(2000, 3, 0.6, 3), after = simulated(2000, 3, 1.0, 3);
  nlohmann::json j = {
      {"schema", kCalibrateSchema},
      {"mode", "fit"},
      {"method", "platt"},
      {"fit_file", "val.npz"},
      {"params_file", nullptr},
      {"apply_file", "test.npz"},
      {"out", "cal.npz"},
      {"save", nullptr},
      {"n_fit", 1500},
      {"n_apply", 2000},
      {"calibrator",
       {{"schema", "arcal.calibrator/1"}, {"method", "platt"}, {"converged", false}, {"a", 1.25}, {"b", -0.5}}},
      {"before", calibration_report_json(before)},
      {"after", calibration_report_json(after)},
      {"warnings", {"fitted on only 20 examples (fewer than 50): its parameters are unreliable"}}};
  const ResultsDocument doc = read_results(j.dump(), "c.json");
  ASSERT_EQ(doc.kind, ResultsDocument::Kind::calibrate);
  EXPECT_EQ(doc.calibration.converged, 0);
  EXPECT_EQ(doc.calibration.fit_file, "val.npz");
  EXPECT_TRUE(doc.calibration.params_file.empty());
  EXPECT_EQ(nlohmann::json::parse(results_text(doc)), j);
  const auto d = document(doc);
  const std::string text = all_text(d);
  EXPECT_NE(text.find("did not converge"), std::string::npos);
  // The headline is the plug-in ECE before and after, the bias-corrected pair beside it, labelled.
  const std::string v = verdict_of(d);
  EXPECT_NE(v.find(report::f4(before.ece.value) + " → " + report::f4(after.ece.value) + " (plug-in; bias-corrected " +
                   report::f4(before.ece.bias_corrected) + " → " + report::f4(after.ece.bias_corrected)),
            std::string::npos)
      << v;
  // The fitted parameters and the fit's warnings are shown.
  EXPECT_NE(text.find("a = 1.25; b = -0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("Warning: fitted on only 20 examples"), std::string::npos);
  const auto* t = find_table(d, "metric");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->header[1], "before");
  EXPECT_EQ(t->header[4], "after");
  j["calibrator"]["converged"] = true;
  EXPECT_EQ(all_text(document(read_results(j.dump(), "c.json"))).find("did not converge"), std::string::npos);
}

TEST(CalibrationReport, OtherSchemasAreRefusedNamingTheThreeThatAreRead) {
  for (const std::string text : {R"({"schema": "arcal.simulate/1"})", R"({"n": 3})", "[1, 2]"}) {
    try {
      read_results(text, "x.json");
      FAIL() << text;
    } catch (const InputError& e) {
      const std::string m = e.what();
      for (const char* s : {"x.json", "arcal.audit/3", "arcal.metrics/1", "arcal.calibrate/1"})
        EXPECT_NE(m.find(s), std::string::npos) << m;
    }
  }
  // a calibrate document without its before/after metrics (arcal calibrate without --json never writes one)
  nlohmann::json j = {{"schema", kCalibrateSchema},
                      {"mode", "split"},
                      {"method", "temperature"},
                      {"fit_file", "a.npz"},
                      {"params_file", nullptr},
                      {"apply_file", "a.npz"},
                      {"out", "b.npz"},
                      {"save", nullptr},
                      {"n_fit", 10},
                      {"n_apply", 10},
                      {"calibrator", nlohmann::json::object()},
                      {"before", nullptr},
                      {"after", nullptr}};
  EXPECT_THROW(read_results(j.dump(), "c.json"), InputError);
}
