// Reading a results.json back into typed results: the audit (arcal.audit/3), its verdict and, when
// `arcal run` wrote it, the study section; or a calibration document, the `--json` object of `arcal
// metrics` (arcal.metrics/1) or `arcal calibrate` (arcal.calibrate/1), which `arcal report` renders for
// a classifier that has no routing to audit. The only reader of these documents: `arcal report` and the
// tests use it. Errors are InputError naming the file and, for a value of the wrong type or a missing
// key, its JSON pointer (this file's implementation is compiled with nlohmann's JSON_DIAGNOSTICS); a
// file of another schema version gets "version N, re-run arcal audit".
#pragma once

#include <string>
#include <vector>

#include "audit/audit.hpp"
#include "results/intervene_json.hpp"
#include "results/study_section.hpp"
#include "results/verdict.hpp"

namespace arcal {

/// What `arcal report` draws for a plain classifier: one trace's metrics (`arcal metrics --json`), or
/// the metrics before and after a post-hoc calibrator on the data it was applied to (`arcal calibrate
/// --json`).
struct CalibrationDocument {
  std::string file;          ///< the trace measured (metrics: "file"; calibrate: "apply_file")
  CalibrationReport before;  ///< metrics: the metrics; calibrate: before calibration
  bool calibrated = false;   ///< calibrate: the fields below are set
  CalibrationReport after;
  std::string method, mode;                      ///< the calibrator; split / fit / params
  std::string fit_file, params_file, out, save;  ///< "" where the document has null
  std::size_t n_fit = 0;
  int converged = -1;                 ///< the calibrator's "converged" (1/0), -1 where it has none (isotonic, ...)
  std::string calibrator;             ///< the calibrator's JSON object as text (written back unchanged)
  std::vector<std::string> warnings;  ///< calibrate: why the fit should not be trusted ("warnings"; empty when none)
};

struct ResultsDocument {
  enum class Kind { audit, metrics, calibrate, intervene } kind = Kind::audit;
  InterventionResults intervene;    ///< kind intervene (arcal intervene --out)
  CalibrationDocument calibration;  ///< kind metrics or calibrate
  AuditResults audit;               ///< kind audit; its verdict (audit.verdict) is read with it
  bool has_study = false;
  StudyResults study;
};

/// Parses `text` (the contents of `path`, named in errors) after the size and nesting checks of
/// core/text_input.hpp. Its "schema" says which document it is: arcal.audit/3, arcal.metrics/1,
/// arcal.calibrate/1 or arcal.intervene/1 (anything else is refused, naming the four).
ResultsDocument read_results(const std::string& text, const std::string& path);

/// The same document written back (results.json's object, as `arcal audit` / `arcal run` write it, or
/// the metrics / calibrate object), as text: used by the round-trip tests.
std::string results_text(const ResultsDocument& doc);

}  // namespace arcal
