// The study report of `arcal report DIR` and `arcal run`: from DIR/results.json alone (the audit's
// results, plus the "study" section that `arcal run` adds) it writes report.html (self-contained:
// inline style, relative links to figures/, no network), report.md, CSV tables, and figures/ drawn by
// gnuplot (report/figures.hpp: NAME.dat + NAME.gp kept beside NAME.svg and NAME.png). Nothing is
// recomputed: every number shown is read from results.json (figures only rearrange it, e.g. the mean
// over runs of each exact-null replicate's gain, which is the pooled null the audit tested against).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace arcal {

struct ReportOutput {
  std::string html, markdown;        ///< paths written
  std::vector<std::string> figures;  ///< SVG and PNG paths
  std::vector<std::string> tables;   ///< CSV paths
  std::vector<std::string> verdict;  ///< the five-line verdict (also at the top of the report)
};

/// (Defined with JSON_DIAGNOSTICS on, see check_report_text: callable from report.cpp only.)
/// Five lines summarising a results.json object: accuracy/ECE of AttnRes against the standard twin,
/// diagnostic rejections (raw/Holm/BH), AR-CondCal against the seed band, probes against their
/// controls, and sensitivity/exact null. Lines for parts that were not run say so.
std::vector<std::string> report_verdict(const nlohmann::json& results);

/// Reads DIR/results.json (schema arcal.audit/1) and writes the report into out_dir. Throws
/// InputError naming the file when results.json is missing, too large or deeply nested, not JSON,
/// not an arcal audit, or holds a value of the wrong type (naming its JSON pointer), and when
/// gnuplot fails (naming the script). All of that is checked before anything is written; the report
/// is rendered into a temporary sibling directory and renamed over out_dir, so a failure never
/// leaves a partial report. out_dir must not contain DIR, and an existing out_dir must be an
/// earlier report (or empty): it is replaced as a whole.
ReportOutput write_report(const std::string& dir, const std::string& out_dir);

/// Parses results.json text (size and nesting limits) and builds the whole report from it without
/// writing anything: what write_report does before it writes. Throws InputError naming `path` and,
/// for a value of the wrong type, its JSON pointer. (Takes text: report.cpp is compiled with
/// nlohmann's JSON_DIAGNOSTICS, whose json type differs from the other files'.)
void check_report_text(const std::string& text, const std::string& path);

}  // namespace arcal
