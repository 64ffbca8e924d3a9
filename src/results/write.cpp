// The writer side of results/read.hpp, compiled without JSON_DIAGNOSTICS (the json type the audit and
// `arcal run` write with; calib/report_json.cpp returns it).
#include <string>

#include "results/audit_json.hpp"
#include "results/read.hpp"

namespace arcal {

namespace {

nlohmann::json calibration_text(const ResultsDocument& doc) {
  const auto& c = doc.calibration;
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  if (doc.kind == ResultsDocument::Kind::metrics) {
    nlohmann::json j = calibration_report_json(c.before);
    if (!c.file.empty()) j["file"] = c.file;
    return j;
  }
  nlohmann::json before = calibration_report_json(c.before), after = calibration_report_json(c.after);
  nlohmann::json j = {{"schema", kCalibrateSchema},
                      {"mode", c.mode},
                      {"method", c.method},
                      {"fit_file", or_null(c.fit_file)},
                      {"params_file", or_null(c.params_file)},
                      {"apply_file", c.file},
                      {"out", c.out},
                      {"save", or_null(c.save)},
                      {"n_fit", c.n_fit},
                      {"n_apply", c.before.n},
                      {"calibrator", nlohmann::json::parse(c.calibrator)},
                      {"before", before},
                      {"after", after}};
  if (!c.warnings.empty()) j["warnings"] = c.warnings;
  return j;
}

}  // namespace

std::string results_text(const ResultsDocument& doc) {
  if (doc.kind == ResultsDocument::Kind::intervene) return nlohmann::json(doc.intervene).dump(1);
  if (doc.kind != ResultsDocument::Kind::audit) return calibration_text(doc).dump(1);
  nlohmann::json j = doc.audit;
  if (doc.has_study) j["study"] = doc.study;
  return j.dump(1);
}

}  // namespace arcal
