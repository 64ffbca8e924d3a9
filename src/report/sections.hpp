// The report's sections, one function each: typed results in (results/read.hpp), a document section
// out (report/document.hpp), figures rendered through report/plots.hpp and tables kept for CSV. They
// format and arrange; every number comes from results.json.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "report/document.hpp"
#include "report/plots.hpp"
#include "results/read.hpp"

namespace arcal::report {

struct Context {
  const ResultsDocument& doc;
  std::string results_path;
  Figures& figures;
  std::vector<std::pair<std::string, Table>> csv;  ///< file name under tables/ -> table
  std::map<std::string, std::string> labels;       ///< run id -> its label (run_labels; set by build_document)
};

/// The heading after which an audit report's detail begins (the browser test measures the page above it).
inline constexpr const char* kAppendixTitle = "Appendix: every test in detail";

Section summary_section(Context& c);
Section training_section(Context& c);  ///< with a study section
Section runs_section(Context& c);      ///< without one: the audited runs
Section routing_section(Context& c);
Section experts_section(Context& c);  ///< mixture-of-experts runs (sections_experts.cpp)
Section diagnostic_section(Context& c);
Section condcal_section(Context& c);
Section probes_section(Context& c);
Section sensitivity_section(Context& c);
Section exact_null_section(Context& c);
Section convergence_section(Context& c);  ///< study with snapshot_epochs
Section configuration_section(Context& c);

/// The whole document in reading order (sections that were not run are left out); a calibration
/// document (kind metrics or calibrate) gets calibration_document.
Document build_document(Context& c);

/// The report of a classifier's metrics or of a calibrator's before/after (sections_calibration.cpp).
Document calibration_document(Context& c);

/// The report of a routing intervention, arcal intervene's JSON (sections_intervene.cpp).
Document intervention_document(Context& c);

/// Run labels: each run's shortest trailing path (file name, then parent folders as needed) that no
/// other run shares, so traces kept in one folder keep their file names and test.npz files in
/// different run folders get their folder. Runs that are not paths keep their id.
std::map<std::string, std::string> run_labels(const std::vector<std::string>& runs);

/// The time the report is generated, "YYYY-MM-DD HH:MM UTC" (its provenance line).
std::string now_utc();

/// The label of `run` in this report (the run id when it has none).
const std::string& run_label(const Context& c, const std::string& run);

}  // namespace arcal::report
