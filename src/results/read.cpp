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

ResultsDocument read_results(const std::string& text, const std::string& path) {
  if (text.size() > input_limits().max_text_bytes)
    throw_input(kFn, path + " is " + byte_size(text.size()) + ", more than the limit of " +
                         byte_size(input_limits().max_text_bytes));
  check_json_nesting(text, kFn, path);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw_input(kFn, path + " is not valid JSON");
  if (!j.is_object() || !j.contains("schema") || !j["schema"].is_string() ||
      j["schema"].get<std::string>().rfind("arcal.audit/", 0) != 0)
    throw_input(kFn, path + " is not an arcal audit result (no \"schema\": \"" + std::string(kAuditSchema) + "\")");
  const std::string schema = j["schema"].get<std::string>();
  if (schema != kAuditSchema)
    throw_input(kFn, path + " has schema " + schema + " (version " + schema.substr(std::string("arcal.audit/").size()) +
                         "); this arcal reads " + kAuditSchema + ": re-run arcal audit (or arcal run) to rewrite it");
  ResultsDocument doc;
  try {
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
