// The report's sections, one function each: typed results in (results/read.hpp), a document section
// out (report/document.hpp), figures rendered through report/plots.hpp and tables kept for CSV. They
// format and arrange; every number comes from results.json.
#pragma once

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
};

Section summary_section(Context& c);
Section training_section(Context& c);  ///< with a study section
Section runs_section(Context& c);      ///< without one: the audited runs
Section routing_section(Context& c);
Section diagnostic_section(Context& c);
Section condcal_section(Context& c);
Section probes_section(Context& c);
Section sensitivity_section(Context& c);
Section exact_null_section(Context& c);
Section convergence_section(Context& c);  ///< study with snapshot_epochs
Section configuration_section(Context& c);

/// The whole document in reading order (sections that were not run are left out).
Document build_document(Context& c);

/// Short run label: the trace file's directory (runs/<dir>/test.npz) or stem, or the run id.
std::string short_run(const std::string& run);

}  // namespace arcal::report
