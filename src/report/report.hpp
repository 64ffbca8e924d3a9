// The study report of `arcal report DIR` and `arcal run`: from DIR/results.json alone (the audit's
// results, plus the "study" section that `arcal run` adds; or a classifier's calibration document,
// the JSON of `arcal metrics --json` / `arcal calibrate --json`), read into typed results
// (results/read.hpp), it writes one self-contained report.html (inline style, every figure embedded
// as an SVG data URI: it opens when mailed alone), report.md, CSV tables, and figures/ drawn by
// gnuplot (NAME.dat + NAME.gp kept beside NAME.svg and NAME.png for editing). It opens with the
// verdict stored in results.json. Nothing is recomputed: the sections (report/sections.hpp) format
// what results.json holds.
#pragma once

#include <string>
#include <vector>

namespace arcal {

struct ReportOutput {
  std::string html, markdown;        ///< paths written
  std::vector<std::string> figures;  ///< SVG and PNG paths
  std::vector<std::string> tables;   ///< CSV paths
  std::string verdict;               ///< results.json's verdict.summary (the report's first paragraph)
};

/// Reads `source`, a directory holding results.json (schema arcal.audit/3, from arcal audit or arcal
/// run) or a JSON file (that results.json, or the object `arcal metrics --json` or `arcal calibrate
/// --json` printed: a classifier's calibration report), and writes the report into out_dir. Throws
/// InputError naming the file when results.json is missing, too large or deeply nested, not JSON,
/// not an arcal audit, of another schema version ("re-run arcal audit"), or holds a value of the
/// wrong type or misses a key (naming its JSON pointer), and when gnuplot fails (naming the script).
/// All of that is checked before anything is written; the report is rendered into a temporary
/// sibling directory and renamed over out_dir, so a failure never leaves a partial report. out_dir
/// must not contain the input file, and an existing out_dir must be arcal's (its .arcal-output
/// marker) or empty unless `force`: it is replaced as a whole; a link as out_dir is refused.
/// Temporaries of report writers that died (out_dir.tmp-PID-START, out_dir.old-PID-START, with
/// arcal's marker naming that process: core/ownership.hpp) are removed, and nothing else.
ReportOutput write_report(const std::string& source, const std::string& out_dir, bool force = false);

/// The same from a document's text (the Python module's `arcal.report(dict, out=...)`): `label` names
/// it in errors and in the report's provenance line.
ReportOutput write_report_text(const std::string& text, const std::string& label, const std::string& out_dir,
                               bool force = false);

/// The report directory when none is given: DIR/report for a directory, STEM_report beside a file.
std::string default_report_dir(const std::string& source);

/// Reads results.json text and builds the whole report from it without writing anything: what
/// write_report does before it writes. Throws InputError naming `path` (the fuzz target's entry).
void check_report_text(const std::string& text, const std::string& path);

}  // namespace arcal
