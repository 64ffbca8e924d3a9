// The writer side of results/read.hpp, compiled without JSON_DIAGNOSTICS (the json type the audit and
// `arcal run` write with; calib/report_json.cpp returns it).
#include <string>

#include "results/audit_json.hpp"
#include "results/read.hpp"

namespace arcal {

std::string results_text(const ResultsDocument& doc) {
  nlohmann::json j = doc.audit;
  if (doc.has_study) j["study"] = doc.study;
  return j.dump(1);
}

}  // namespace arcal
