#include "report/report.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <signal.h>
#include <unistd.h>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/limits.hpp"
#include "core/ownership.hpp"
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

/// The report directory is replaced as a whole, so it must be arcal's (its marker, a regular file) or
/// empty; --force replaces it anyway. A directory without the marker is the user's whatever its
/// entries are called (paper/ holding figures/fig1.pdf used to pass as an earlier report).
void check_report_target(const std::string& input, const std::string& out_dir, bool force, const std::string& hint) {
  if (out_dir.empty()) throw_input("--out", "the report directory is empty");
  if (!input.empty() && path_within(input, out_dir))
    throw_input("--out", out_dir + " would contain the input " + input +
                             ", but the report directory is "
                             "replaced as a whole; " +
                             hint);
  std::error_code ec;
  const auto st = fs::symlink_status(out_dir, ec);
  if (!fs::exists(st)) return;
  if (fs::is_symlink(st))
    throw_input("--out", out_dir +
                             " is a symbolic link; the report directory is replaced as a whole and arcal never "
                             "replaces through a link: give the directory's own path or another --out");
  if (!fs::is_directory(st)) throw_input("--out", out_dir + " exists and is not a directory");
  if (force || has_output_marker(out_dir)) return;
  const std::string other = foreign_entry(out_dir, {});
  if (other == kOutputMarker || other == ".lock")
    throw_input("--out", out_dir + "/" + other + " is a symbolic link or not a regular file, so it is not arcal's " +
                             (other == ".lock" ? "lock" : "marker") + "; remove it, or choose another --out");
  if (!other.empty())
    throw_input("--out", out_dir + " holds " + other + " and was not made by arcal report (no " + kOutputMarker +
                             "); the report directory is replaced as a whole, so choose another --out, move "
                             "it out, or pass --force to replace the directory anyway");
}

/// OUT.tmp-TAG and OUT.old-TAG of report writers that no longer run (a kill -9 mid-report): only
/// directories whose name and marker name the same dead process (core/ownership.hpp); a user's
/// report.old-2024 is not touched.
void remove_stale_report_temporaries(const std::string& out_dir) {
  const fs::path target(out_dir);
  const fs::path parent = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string base = target.filename().string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string path = e.path().string();
    for (const char* tag : {".tmp-", ".old-"}) {
      if (!stale_owned_dir(path, base + tag)) continue;
      std::error_code rm;
      fs::remove_all(e.path(), rm);
    }
  }
}

/// Renders a checked document into out_dir (checked by check_report_target) through a sibling
/// temporary directory.
ReportOutput write_document(const ResultsDocument& doc, const std::string& path, const std::string& out_dir) {
  remove_stale_report_temporaries(out_dir);

  // Rendered into a sibling temporary directory (made by this process, with its marker), then renamed
  // over out_dir: an interrupted or failed report never leaves a partial directory, and an earlier
  // report stays until the new one is complete. The earlier one is first moved into OUT.old-TAG/, a
  // directory this process made, so that what is removed afterwards is provably arcal's.
  const std::string tag = process_tag();
  const std::string tmp = out_dir + ".tmp-" + tag, old = out_dir + ".old-" + tag, previous = old + "/previous";
  std::error_code ec;
  const fs::path parent = fs::path(out_dir).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  make_owned_dir(tmp, kFn);
  ReportOutput out;
  try {
    out = build_report(doc, path, tmp);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  const bool had = fs::exists(fs::symlink_status(out_dir, ec));
  if (had) {
    try {
      make_owned_dir(old, kFn);
    } catch (...) {
      fs::remove_all(tmp, ec);
      throw;
    }
    if (std::rename(out_dir.c_str(), previous.c_str()) != 0) {
      const std::string err = std::strerror(errno);
      fs::remove_all(tmp, ec);
      fs::remove_all(old, ec);
      throw_input(kFn, "cannot replace " + out_dir + ": " + err);
    }
  }
  if (std::rename(tmp.c_str(), out_dir.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    if (had && std::rename(previous.c_str(), out_dir.c_str()) == 0) fs::remove_all(old, ec);
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
    throw_input(kFn,
                path + " does not exist (" +
                    (is_dir ? std::string("run arcal audit --out DIR or arcal run first")
                            : std::string("give a directory holding results.json, or the JSON file arcal metrics "
                                          "--json or arcal calibrate --json printed, or arcal intervene --out wrote")) +
                    ")");
  if (!fs::is_regular_file(path)) throw_input(kFn, path + " is not a regular file");
  const ResultsDocument doc =
      read_results(read_text_file(path, kFn, "results.json", input_limits().max_text_bytes), path);
  check_report_target(path, out_dir, force,
                      is_dir ? "choose a directory outside " + source + " or below it (default " + source + "/report)"
                             : "choose another directory (default " + default_report_dir(source) + ")");
  return write_document(doc, path, out_dir);
}

ReportOutput write_report_text(const std::string& text, const std::string& label, const std::string& out_dir,
                               bool force) {
  const ResultsDocument doc = read_results(text, label);
  check_report_target("", out_dir, force, "");
  return write_document(doc, label, out_dir);
}

}  // namespace arcal
