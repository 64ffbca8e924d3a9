// Compiled with nlohmann's JSON_DIAGNOSTICS (CMakeLists.txt): the inline from_json of
// results/audit_json.hpp, study.hpp and verdict.hpp are instantiated here for the diagnostics json
// type, so a missing key or a value of the wrong type is reported with its JSON pointer. No json
// crosses this file's interface (text in, typed results out). GCC 12 reports a false -Warray-bounds
// inside std::map's node allocation under JSON_DIAGNOSTICS; the pragma covers this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
#include "results/read.hpp"

#include <string>

#include "core/check.hpp"
#include "core/limits.hpp"
#include "core/text_input.hpp"
#include "results/audit_json.hpp"

namespace arcal {

namespace {
const char* kFn = "results.json reader";
}

namespace {

/// arcal.metrics/1 (`arcal metrics --json`) or arcal.calibrate/1 (`arcal calibrate --json`).
void read_calibration(const nlohmann::json& j, ResultsDocument& doc) {
  auto& c = doc.calibration;
  if (doc.kind == ResultsDocument::Kind::metrics) {
    c.file = results::value_or(j, "file", std::string());
    j.get_to(c.before);
    return;
  }
  c.calibrated = true;
  c.file = j.at("apply_file").get<std::string>();
  c.method = j.at("method").get<std::string>();
  c.mode = j.at("mode").get<std::string>();
  c.fit_file = results::value_or(j, "fit_file", std::string());
  c.params_file = results::value_or(j, "params_file", std::string());
  c.out = j.at("out").get<std::string>();
  c.save = results::value_or(j, "save", std::string());
  results::get_to(j, "n_fit", c.n_fit);
  const auto& cal = j.at("calibrator");
  if (!cal.is_object())
    throw_input(kFn, "/calibrator must be an object (the calibrator arcal calibrate --save writes)");
  if (const auto it = cal.find("converged"); it != cal.end() && it->is_boolean()) c.converged = it->get<bool>() ? 1 : 0;
  c.calibrator = cal.dump();
  if (const auto it = j.find("warnings"); it != j.end()) {
    if (!it->is_array()) throw_input(kFn, "/warnings must be an array of strings");
    for (const auto& w : *it) {
      if (!w.is_string()) throw_input(kFn, "/warnings must be an array of strings");
      c.warnings.push_back(w.get<std::string>());
    }
  }
  if (j.at("before").is_null() || j.at("after").is_null())
    throw_input(kFn, "/before and /after must be the metrics objects that arcal calibrate --json writes");
  j.at("before").get_to(c.before);
  j.at("after").get_to(c.after);
}

}  // namespace

ResultsDocument read_results(const std::string& text, const std::string& path) {
  if (text.size() > input_limits().max_text_bytes)
    throw_input(kFn, path + " is " + byte_size(text.size()) + ", more than the limit of " +
                         byte_size(input_limits().max_text_bytes));
  check_json_nesting(text, kFn, path);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw_input(kFn, path + " is not valid JSON");
  const std::string schema =
      j.is_object() && j.contains("schema") && j["schema"].is_string() ? j["schema"].get<std::string>() : std::string();
  ResultsDocument doc;
  if (schema == kMetricsSchema)
    doc.kind = ResultsDocument::Kind::metrics;
  else if (schema == kCalibrateSchema)
    doc.kind = ResultsDocument::Kind::calibrate;
  else if (schema == kInterveneSchema)
    doc.kind = ResultsDocument::Kind::intervene;
  else if (schema.rfind("arcal.audit/", 0) != 0)
    throw_input(kFn, path + " is not an arcal result: its \"schema\" must be \"" + std::string(kAuditSchema) +
                         "\" (arcal audit, arcal run), \"" + kMetricsSchema + "\" (arcal metrics --json), \"" +
                         kCalibrateSchema + "\" (arcal calibrate --json) or \"" + kInterveneSchema +
                         "\" (arcal intervene --out)" + (schema.empty() ? std::string() : ", not \"" + schema + "\""));
  else if (schema != kAuditSchema)
    throw_input(kFn, path + " has schema " + schema + " (version " + schema.substr(std::string("arcal.audit/").size()) +
                         "); this arcal reads " + kAuditSchema + ": re-run arcal audit (or arcal run) to rewrite it");
  try {
    if (doc.kind == ResultsDocument::Kind::intervene) {
      j.get_to(doc.intervene);
      return doc;
    }
    if (doc.kind != ResultsDocument::Kind::audit) {
      read_calibration(j, doc);
      return doc;
    }
    j.get_to(doc.audit);
    doc.has_study = j.contains("study");
    if (doc.has_study) j.at("study").get_to(doc.study);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    const auto bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    throw_input(kFn, path + ": " + what);
  }
  return doc;
}

}  // namespace arcal
