// arcal report DIR|FILE.json: renders DIR/results.json (from arcal audit or arcal run) into DIR/report/,
// or a JSON file (results.json, or what arcal metrics --json / arcal calibrate --json printed) into
// STEM_report/ beside it (or --out): report.html, report.md, tables/*.csv, figures/ (SVG + PNG with
// their .dat and .gp).
#include <fmt/format.h>

#include <iostream>

#include "command.hpp"
#include "option_binding.hpp"
#include "report/report.hpp"

namespace {

struct ReportOptions {
  std::string dir, out;
  bool force = false;
};

int run_report(const ReportOptions& o) {
  const std::string out = o.out.empty() ? arcal::default_report_dir(o.dir) : o.out;
  const auto rep = arcal::write_report(o.dir, out, o.force);
  std::cout << fmt::format("wrote {} ({} figures, {} tables) and {}\n", rep.html, rep.figures.size() / 2,
                           rep.tables.size(), rep.markdown);
  std::cout << "  " << rep.verdict << "\n";
  return 0;
}

/// Every option of `arcal report` (docs/interface.md "Command options", generated).
const arcal::OptionTable<ReportOptions>& report_options() {
  using C = ReportOptions;
  using O = arcal::Option<C>;
  static const arcal::OptionTable<C> table = {
      O("source", "source",
        "Directory holding results.json (written by arcal audit --out or arcal run), or a JSON file: results.json, "
        "or what arcal metrics --json or arcal calibrate --json printed (a classifier's calibration report: metrics "
        "with intervals and the reliability diagram, before/after a calibrator)",
        &C::dir)
          .given()
          .existing(O::Path::existing_path),
      {"out", "--out", "Report directory (default: DIR/report, or STEM_report beside a FILE.json)", &C::out},
      {"force", "--force",
       "Replace --out even when it holds files that are not part of an arcal report (it is replaced as a whole)",
       &C::force},
  };
  return table;
}

arcal::cli::RunFn setup(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  arcal::cli::bind_options(app, report_options(), *o);
  return [o]() { return run_report(*o); };
}

}  // namespace

ARCAL_COMMAND("report",
              "HTML/Markdown report with figures and CSV tables from results.json (an audit), or from the JSON of "
              "arcal metrics / arcal calibrate (a classifier's calibration)",
              setup);
