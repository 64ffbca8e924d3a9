#include "report/report.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <signal.h>
#include <unistd.h>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/limits.hpp"
#include "core/paths.hpp"
#include "core/text_input.hpp"
#include "report/sections.hpp"
#include "results/read.hpp"

namespace arcal {

namespace {

namespace fs = std::filesystem;

const char* kFn = "arcal report";

/// Builds the document; with an empty out_dir nothing is written (the dry run of check_report_text).
ReportOutput build_report(const ResultsDocument& doc, const std::string& path, const std::string& out_dir) {
  const bool dry = out_dir.empty();
  const std::string figdir = dry ? "" : out_dir + "/figures", tabdir = out_dir + "/tables";
  if (!dry) {
    std::error_code ec;
    fs::create_directories(figdir, ec);
    if (!ec) fs::create_directories(tabdir, ec);
    if (ec) throw_input(kFn, "cannot create " + out_dir + ": " + ec.message());
  }
  report::Figures figures(figdir);
  report::Context c{doc, path, figures, {}, {}};
  const report::Document d = report::build_document(c);
  ReportOutput out;
  out.verdict = doc.audit.verdict.summary;
  if (doc.kind != ResultsDocument::Kind::audit)  // the calibration report's first line
    for (const auto& b : d.sections.front().blocks)
      if (b.kind == report::Block::verdict) out.verdict = b.body;
  out.html = out_dir + "/report.html";
  out.markdown = out_dir + "/report.md";
  if (dry) return out;
  for (const auto& [name, table] : c.csv) {
    write_file_atomic(tabdir + "/" + name, report::table_csv(table));
    out.tables.push_back(tabdir + "/" + name);
  }
  write_file_atomic(out.markdown, report::render_markdown(d));
  write_file_atomic(out.html, report::render_html(d, figures.svg, figures.widths));
  out.figures = figures.paths;
  return out;
}

/// The entries of a report directory (what build_report writes).
const std::vector<std::string> kReportEntries{"report.html", "report.md", "figures", "tables"};

/// The report directory is replaced as a whole, so it must be arcal's (the marker, or a report of an
/// earlier arcal: only report entries) and hold nothing else; --force replaces it anyway.
void check_report_target(const std::string& input, const std::string& out_dir, bool force, const std::string& hint) {
  if (out_dir.empty()) throw_input("--out", "the report directory is empty");
  if (!input.empty() && path_within(input, out_dir))
    throw_input("--out", out_dir + " would contain the input " + input + ", but the report directory is "
                                   "replaced as a whole; " + hint);
  std::error_code ec;
  if (!fs::exists(out_dir, ec)) return;
  if (!fs::is_directory(out_dir, ec)) throw_input("--out", out_dir + " exists and is not a directory");
  if (force) return;
  const std::string other = foreign_entry(out_dir, kReportEntries);
  if (!other.empty())
    throw_input("--out", out_dir + " holds " + other + ", which is not part of an arcal report; the report directory is "
                                   "replaced as a whole, so choose another --out, move it out, or pass --force to "
                                   "replace the directory anyway");
}

/// DIR.tmp-PID and DIR.old-PID of report writers that no longer run (a kill -9 mid-report).
void remove_stale_report_temporaries(const std::string& out_dir) {
  const fs::path target(out_dir);
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string base = target.filename().string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    for (const char* tag : {".tmp-", ".old-"}) {
      const std::string prefix = base + tag;
      if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string pid = name.substr(prefix.size());
      if (pid.size() > 10 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      const long long p = std::stoll(pid);
      if (p <= 0 || p == ::getpid() || ::kill(static_cast<pid_t>(p), 0) == 0 || errno != ESRCH) continue;
      std::error_code rm;
      fs::remove_all(e.path(), rm);
    }
  }
}

/// Renders a checked document into out_dir (checked by check_report_target) through a sibling
/// temporary directory.
ReportOutput write_document(const ResultsDocument& doc, const std::string& path, const std::string& out_dir) {
  remove_stale_report_temporaries(out_dir);

  // Rendered into a sibling temporary directory, then renamed over out_dir: an interrupted or
  // failed report never leaves a partial directory, and an earlier report stays until the new one
  // is complete.
  const std::string tag = std::to_string(::getpid());
  const std::string tmp = out_dir + ".tmp-" + tag, old = out_dir + ".old-" + tag;
  std::error_code ec;
  const fs::path parent = fs::path(out_dir).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  fs::remove_all(tmp, ec);
  ReportOutput out;
  try {
    out = build_report(doc, path, tmp);
    mark_output_dir(tmp, "arcal report");
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  const bool had = fs::exists(out_dir, ec);
  if (had && std::rename(out_dir.c_str(), old.c_str()) != 0) {
    fs::remove_all(tmp, ec);
    throw_input(kFn, "cannot replace " + out_dir + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), out_dir.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    if (had) std::rename(old.c_str(), out_dir.c_str());
    fs::remove_all(tmp, ec);
    throw_input(kFn, "cannot move the report into " + out_dir + ": " + err);
  }
  if (had) fs::remove_all(old, ec);
  auto moved = [&](std::string& p) {
    if (p.compare(0, tmp.size(), tmp) == 0) p = out_dir + p.substr(tmp.size());
  };
  moved(out.html);
  moved(out.markdown);
  for (auto& p : out.figures) moved(p);
  for (auto& p : out.tables) moved(p);
  return out;
}

}  // namespace

void check_report_text(const std::string& text, const std::string& path) {
  build_report(read_results(text, path), path, "");
}

std::string default_report_dir(const std::string& source) {
  std::error_code ec;
  if (fs::is_directory(source, ec)) return source + "/report";
  const fs::path p(source);
  return (p.parent_path() / (p.stem().string() + "_report")).string();
}

ReportOutput write_report(const std::string& source, const std::string& out_dir, bool force) {
  std::error_code ec0;
  const bool is_dir = fs::is_directory(source, ec0);
  const std::string path = is_dir ? source + "/results.json" : source;
  if (!fs::exists(path))
    throw_input(kFn, path + " does not exist (" +
                         (is_dir ? std::string("run arcal audit --out DIR or arcal run first")
                                 : std::string("give a directory holding results.json, or the JSON file arcal metrics "
                                               "--json or arcal calibrate --json printed")) +
                         ")");
  if (!fs::is_regular_file(path)) throw_input(kFn, path + " is not a regular file");
  const ResultsDocument doc = read_results(read_text_file(path, kFn, "results.json", input_limits().max_text_bytes), path);
  check_report_target(path, out_dir, force,
                      is_dir ? "choose a directory outside " + source + " or below it (default " + source + "/report)"
                             : "choose another directory (default " + default_report_dir(source) + ")");
  return write_document(doc, path, out_dir);
}

ReportOutput write_report_text(const std::string& text, const std::string& label, const std::string& out_dir, bool force) {
  const ResultsDocument doc = read_results(text, label);
  check_report_target("", out_dir, force, "");
  return write_document(doc, label, out_dir);
}

}  // namespace arcal
