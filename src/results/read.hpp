// Reading a results.json back into typed results: the audit (arcal.audit/3), its verdict and, when
// `arcal run` wrote it, the study section. The only reader of results.json: `arcal report` and the
// tests use it. Errors are InputError naming the file and, for a value of the wrong type or a missing
// key, its JSON pointer (this file's implementation is compiled with nlohmann's JSON_DIAGNOSTICS); a
// file of another schema version gets "version N, re-run arcal audit".
#pragma once

#include <string>

#include "audit/audit.hpp"
#include "results/study.hpp"
#include "results/verdict.hpp"

namespace arcal {

struct ResultsDocument {
  AuditResults audit;  ///< its verdict (audit.verdict) is read with it
  bool has_study = false;
  StudyResults study;
};

/// Parses `text` (the contents of `path`, named in errors) after the size and nesting checks of
/// core/text_input.hpp.
ResultsDocument read_results(const std::string& text, const std::string& path);

/// The same document written back (results.json's object, as `arcal audit` / `arcal run` write it),
/// as text: used by the round-trip tests.
std::string results_text(const ResultsDocument& doc);

}  // namespace arcal
