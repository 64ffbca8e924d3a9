// `arcal report` and `arcal run` end to end. The report test audits three simulated traces (every
// audit part, tiny sizes), renders the report, checks every file the HTML references exists and parses
// (SVG as XML via Python's xml.etree, PNG signature and IHDR), checks that report.html embeds every
// figure and loads nothing, and screenshots a copy of report.html alone in an empty directory with
// headless Chromium: the screenshot must not be blank, judged against a screenshot of an empty page.
// The run test drives a tiny study through training, tracing, audit and report, then checks that a
// re-run skips everything, that a run with its summary removed resumes, and that a bad study file
// fails before anything is written.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "core/atomic_file.hpp"
#include "io/trace.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

const std::string kArcal = std::string(ARCAL_BINARY_DIR) + "/arcal";
const std::string kPy = ARCAL_TEST_PYTHON;

std::string tmpdir(const std::string& name) { return arcal::testing::fresh_dir("cli_run/" + name); }

arcal::testing::CmdResult run(const std::string& cmd, const std::string& dir, const std::string& tag = "cmd") {
  return arcal::testing::run_command(cmd, dir, tag);
}

/// PNG: signature, IHDR size, and the share of non-zero bytes in the inflated (filtered) scanlines.
/// A uniform page filters to (almost) all zeros; text and figures do not.
struct PngInfo {
  bool ok = false;
  std::uint32_t width = 0, height = 0;
  double nonzero = 0;
};

std::uint32_t be32(const unsigned char* p) { return (std::uint32_t(p[0]) << 24) | (p[1] << 16) | (p[2] << 8) | p[3]; }

PngInfo png_info(const std::string& path) {
  PngInfo info;
  const std::string s = arcal::read_file(path);
  const unsigned char* b = reinterpret_cast<const unsigned char*>(s.data());
  static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (s.size() < 33 || std::memcmp(b, sig, 8) != 0 || std::memcmp(b + 12, "IHDR", 4) != 0) return info;
  info.width = be32(b + 16);
  info.height = be32(b + 20);
  std::string idat;
  for (std::size_t pos = 8; pos + 12 <= s.size();) {
    const std::uint32_t len = be32(b + pos);
    if (pos + 12 + len > s.size()) return info;
    if (std::memcmp(b + pos + 4, "IDAT", 4) == 0) idat.append(s, pos + 8, len);
    pos += 12 + len;
  }
  std::vector<unsigned char> raw(std::size_t(info.height) * (std::size_t(info.width) * 4 + 1) + 1024);
  uLongf n = raw.size();
  if (uncompress(raw.data(), &n, reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK) return info;
  std::size_t nz = 0;
  for (uLongf i = 0; i < n; ++i) nz += raw[i] != 0;
  info.nonzero = double(nz) / double(n);
  info.ok = true;
  return info;
}

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (fs::exists(p)) return p;
  return "";
}

std::string screenshot(const std::string& html, const std::string& png, const std::string& dir) {
  const auto r =
      run(chromium() +
              " --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,2000 --screenshot=" + png +
              " file://" + fs::absolute(html).string(),
          dir, "chromium");
  return r.code == 0 ? "" : r.err;
}

/// Validates a JSON file against docs/schema/NAME with Debian's python3-jsonschema; "" when valid.
std::string schema_errors(const std::string& file, const std::string& schema, const std::string& dir) {
  const auto r =
      run(kPy +
              " -c \"import json, sys, jsonschema; s = json.load(open(sys.argv[1])); "
              "v = jsonschema.Draft7Validator(s); errs = list(v.iter_errors(json.load(open(sys.argv[2])))); "
              "[print(list(e.absolute_path), e.message[:300]) for e in errs[:5]]; sys.exit(1 if errs else 0)\" " +
              std::string(ARCAL_SOURCE_DIR) + "/docs/schema/" + schema + " " + file,
          dir, "schema");
  return r.code == 0 ? "" : r.out + r.err;
}

}  // namespace

TEST(CliReport, EveryReferencedFigureExistsAndParsesAndTheScreenshotIsNotBlank) {
  const auto dir = tmpdir("report");
  std::string traces;
  for (int s = 0; s < 3; ++s) {
    const std::string f = dir + "/sim" + std::to_string(s) + ".npz";
    ASSERT_EQ(run(kArcal + " simulate --out " + f + " --n 1500 --classes 10 --seed " + std::to_string(s), dir).code, 0);
    traces += " " + f;
  }
  const auto a =
      run(kArcal + " audit" + traces + " --out " + dir +
              "/audit --permutations 300 --probe-restarts 1 --sensitivity "
              "--sensitivity-draws 1 --sensitivity-effects 0.01,0.02 --exact-null --null-replicates 3 --quiet",
          dir, "audit");
  ASSERT_EQ(a.code, 0) << a.err;
  // results.json with every part (probes, sensitivity, exact null with its model-based null) meets its schema.
  EXPECT_EQ(schema_errors(dir + "/audit/results.json", "audit.schema.json", dir), "");
  {  // ... and the schema rejects an old version or a missing verdict (the check can fail).
    auto j = nlohmann::json::parse(arcal::read_file(dir + "/audit/results.json"));
    j["schema"] = "arcal.audit/2";
    arcal::write_file_atomic(dir + "/old.json", j.dump());
    EXPECT_NE(schema_errors(dir + "/old.json", "audit.schema.json", dir), "");
    j["schema"] = "arcal.audit/3";
    j.erase("verdict");
    arcal::write_file_atomic(dir + "/old.json", j.dump());
    EXPECT_NE(schema_errors(dir + "/old.json", "audit.schema.json", dir), "");
  }
  const auto r = run(kArcal + " report " + dir + "/audit", dir, "report");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string html_path = dir + "/audit/report/report.html";
  const std::string html = arcal::read_file(html_path);
  EXPECT_TRUE(fs::exists(dir + "/audit/report/report.md"));
  for (const char* t : {"training", "diagnostic", "condcal", "probe_tests", "sensitivity", "exact_null"})
    if (std::string(t) != "training") {
      EXPECT_TRUE(fs::exists(dir + "/audit/report/tables/" + std::string(t) + ".csv")) << t;
    }

  // The HTML stands alone: every figure is an inline SVG data URI and nothing is loaded from disk.
  const std::regex local("(?:src)=\"(?!data:)([^\"]+)\"");
  EXPECT_FALSE(std::regex_search(html, local)) << "report.html loads a file";
  std::size_t inline_svgs = 0;
  for (std::size_t p = html.find("src=\"data:image/svg+xml;base64,"); p != std::string::npos;
       p = html.find("src=\"data:image/svg+xml;base64,", p + 1))
    ++inline_svgs;
  // All ten figure kinds of the report (reliability per run and per tertile, routing heatmap,
  // permutation nulls, p-values, AR-CondCal band, bandwidth sensitivity, probe gains, recovery, exact null).
  EXPECT_EQ(inline_svgs, 10u);
  // The same figures are kept for editing: figures/NAME.svg parses as XML, its PNG twin has a valid header.
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir + "/audit/report/figures")) {
    const std::string p = e.path().string();
    if (p.size() < 4 || p.substr(p.size() - 4) != ".svg") continue;
    ++files;
    EXPECT_EQ(run(kPy +
                      " -c \"import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); "
                      "sys.exit(0 if r.tag.endswith('svg') else 1)\" " +
                      p,
                  dir, "xml")
                  .code,
              0)
        << p;
    const auto info = png_info(p.substr(0, p.size() - 4) + ".png");
    EXPECT_TRUE(info.ok) << p;
    EXPECT_GT(info.width, 100u);
    const std::string stem = p.substr(0, p.size() - 4);
    EXPECT_TRUE(fs::exists(stem + ".dat") && fs::exists(stem + ".gp")) << p;
  }
  EXPECT_EQ(files, 10u);
  // The verdict opens the report and is the one stored in results.json.
  const auto results = nlohmann::json::parse(arcal::read_file(dir + "/audit/results.json"));
  const std::string summary = results["verdict"]["summary"].get<std::string>();
  EXPECT_FALSE(summary.empty());
  EXPECT_NE(html.find("class=\"verdict\""), std::string::npos);
  EXPECT_NE(r.out.find(summary), std::string::npos) << r.out;

  const std::string browser = chromium();
  if (browser.empty()) {
    if (std::getenv("ARCAL_SKIP_BROWSER")) GTEST_SKIP() << "no chromium and ARCAL_SKIP_BROWSER set";
    FAIL() << "chromium not found (scripts/setup.sh installs Debian's chromium; ARCAL_SKIP_BROWSER=1 skips this check)";
  }
  // Screenshot of report.html copied alone into an empty directory (as if mailed).
  fs::create_directories(dir + "/mailed");
  fs::copy_file(html_path, dir + "/mailed/report.html");
  const std::string shot = dir + "/report.png", blank_html = dir + "/blank.html", blank_shot = dir + "/blank.png";
  ASSERT_EQ(screenshot(dir + "/mailed/report.html", shot, dir), "");
  arcal::write_file_atomic(blank_html, "<!DOCTYPE html><html><body></body></html>");
  ASSERT_EQ(screenshot(blank_html, blank_shot, dir), "");
  const auto page = png_info(shot), blank = png_info(blank_shot);
  ASSERT_TRUE(page.ok && blank.ok);
  EXPECT_EQ(page.width, 1200u);
  // The check separates a blank page from the report by a wide margin.
  EXPECT_LT(blank.nonzero, 0.002) << "blank page";
  EXPECT_GT(page.nonzero, 0.02) << "report page";
}

TEST(CliReport, BadInputIsRefusedWithoutOutput) {
  const auto dir = tmpdir("report_bad");
  auto r = run(kArcal + " report " + dir, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("results.json does not exist"), std::string::npos) << r.err;
  arcal::write_file_atomic(dir + "/results.json", "{\"schema\": \"something/1\"}");
  r = run(kArcal + " report " + dir, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is not an arcal result"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not \"something/1\""), std::string::npos) << r.err;
  arcal::write_file_atomic(dir + "/results.json", "{\"schema\": ");
  r = run(kArcal + " report " + dir, dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/report/report.html"));
}

TEST(CliRun, TinyStudyEndToEndThenSkipsAndResumes) {
  const auto dir = tmpdir("study");
  // One AttnRes run and its standard twin, a few steps each, traced on the validation split; the
  // audit's diagnostic and AR-CondCal only (the probe parts are covered by the report test above).
  const std::string cfg = dir + "/tiny.toml";
  arcal::write_file_atomic(cfg,
                           "name = \"tiny\"\n[train]\nseeds = [3]\nepochs = 1\ntrain_subset = 6000\nmax_steps = 4\n"
                           "batch_size = 64\n[trace]\nsplit = \"val\"\n[audit]\npermutations = 200\nbins = 5\n"
                           "probes = false\nsensitivity = false\nexact_null = false\n");
  const std::string out = dir + "/out";
  auto r = run(kArcal + " run --config " + cfg + " --out " + out, dir, "first");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("report: " + out + "/report/report.html"), std::string::npos) << r.out;
  const auto results = nlohmann::json::parse(arcal::read_file(out + "/results.json"));
  ASSERT_TRUE(results.contains("study"));
  EXPECT_EQ(schema_errors(out + "/results.json", "audit.schema.json", dir), "");
  EXPECT_EQ(results["study"]["runs"].size(), 2u);
  EXPECT_EQ(results["diagnostic"]["tests"].size(), 2u);  // 1 AttnRes run x (re, rdv)
  EXPECT_TRUE(results.contains("condcal"));
  EXPECT_FALSE(results.contains("sensitivity"));
  for (const auto& run_row : results["study"]["runs"]) {
    // The trace's accuracy is the run's own: the metrics come from the traced predictions.
    EXPECT_GT(run_row["metrics"]["accuracy"].get<double>(), 0.0);
    EXPECT_EQ(run_row["metrics"]["n"].get<int>(), 3000);  // the held-out 5 % of the 60,000 training images
  }
  EXPECT_TRUE(fs::exists(out + "/report/report.html"));
  EXPECT_TRUE(fs::exists(out + "/study.toml"));

  // Re-run: everything is complete.
  const std::string model0 = out + "/" + results["study"]["runs"][0]["dir"].get<std::string>() + "/model.pt";
  const auto mtime = fs::last_write_time(model0);
  r = run(kArcal + " run --config " + cfg + " --out " + out, dir, "second");
  ASSERT_EQ(r.code, 0) << r.err;
  std::size_t skipped = 0;
  for (std::size_t p = r.out.find("trained (skipped)"); p != std::string::npos;
       p = r.out.find("trained (skipped)", p + 1))
    ++skipped;
  EXPECT_EQ(skipped, 2u) << r.out;
  EXPECT_NE(r.out.find("complete (skipped)"), std::string::npos) << r.out;
  EXPECT_EQ(fs::last_write_time(model0), mtime);

  // A run whose summary is gone (interrupted after its last checkpoint) resumes, and only it.
  const std::string run1 = out + "/" + results["study"]["runs"][1]["dir"].get<std::string>();
  fs::remove(run1 + "/summary.json");
  r = run(kArcal + " run --config " + cfg + " --out " + out + " --no-report", dir, "third");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("resuming"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(run1 + "/summary.json"));

  // Each training wrote its trace (arcal train --trace). A trained run whose trace is gone gets an
  // `arcal trace` job instead, and it writes the same arrays from model.pt.
  const std::string trace0 = out + "/" + results["study"]["runs"][0]["dir"].get<std::string>() + "/val.npz";
  const auto before = arcal::load_trace(trace0);
  fs::remove(trace0);
  r = run(kArcal + " run --config " + cfg + " --out " + out + " --no-report", dir, "retrace");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto after = arcal::load_trace(trace0);
  EXPECT_EQ(before.n, 3000u);
  EXPECT_EQ(before.logits, after.logits);
  EXPECT_EQ(before.routing, after.routing);
  EXPECT_EQ(before.routing_entropy, after.routing_entropy);
  EXPECT_EQ(before.meta_json, after.meta_json);

  // --print-config prints the resolved study, which reads back to itself.
  r = run(kArcal + " run --config " + cfg + " --print-config", dir, "print");
  ASSERT_EQ(r.code, 0);
  arcal::write_file_atomic(dir + "/printed.toml", r.out);
  const auto again = run(kArcal + " run --config " + dir + "/printed.toml --print-config", dir, "print2");
  EXPECT_EQ(again.out, r.out);
  EXPECT_NE(r.out.find("seeds = [3]"), std::string::npos);
}

TEST(CliRun, ConvergenceAuditOfSnapshots) {
  const auto dir = tmpdir("convergence");
  // One AttnRes run and its twin, 2 short epochs, a snapshot after epoch 1: the audit runs on the
  // snapshot's trace and on the final model's, and the report gains the convergence section.
  const std::string cfg = dir + "/conv.toml";
  arcal::write_file_atomic(
      cfg,
      "name = \"conv\"\n[train]\nseeds = [3]\nepochs = 2\ntrain_subset = 640\nbatch_size = 64\n"
      "snapshot_epochs = [1]\nprecision = \"fp32\"\n[trace]\nsplit = \"val\"\n[audit]\npermutations = 200\n"
      "bins = 5\nprobes = false\nsensitivity = false\nexact_null = false\n");
  const std::string out = dir + "/out";
  const auto r = run(kArcal + " run --config " + cfg + " --out " + out, dir, "conv");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const auto results = nlohmann::json::parse(arcal::read_file(out + "/results.json"));
  EXPECT_EQ(schema_errors(out + "/results.json", "audit.schema.json", dir), "");
  const auto& conv = results["study"]["convergence"];
  ASSERT_EQ(conv.size(), 2u);
  EXPECT_EQ(conv[0]["epoch"], 1);
  EXPECT_EQ(conv[1]["epoch"], 2);
  EXPECT_EQ(conv[1]["verdict"], results["verdict"]);  // the last point is the final audit
  EXPECT_NE(conv[0]["audit_dir"], conv[1]["audit_dir"]);
  for (const auto& p : conv) {
    EXPECT_EQ(p["runs"], 1);
    EXPECT_GT(p["accuracy_mean"].get<double>(), 0.0);
    EXPECT_TRUE(fs::exists(out + "/" + p["audit_dir"].get<std::string>() + "/results.json"));
  }
  // The snapshot is a run directory of its own: config.json and model.pt, traced on the split.
  const std::string run_dir = out + "/" + results["study"]["runs"][0]["dir"].get<std::string>();
  EXPECT_TRUE(fs::exists(run_dir + "/epoch-1/model.pt"));
  EXPECT_TRUE(fs::exists(run_dir + "/epoch-1/val.npz"));
  EXPECT_TRUE(fs::exists(out + "/report/tables/convergence.csv"));
  EXPECT_NE(arcal::read_file(out + "/report/report.html").find("Convergence: the audit along training"),
            std::string::npos);
}

TEST(CliRun, BadStudyFileFailsBeforeWritingAnything) {
  const auto dir = tmpdir("study_bad");
  arcal::write_file_atomic(dir + "/bad.toml", "[train]\nepoch = 3\n");
  const auto r = run(kArcal + " run --config " + dir + "/bad.toml --out " + dir + "/out", dir);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown key 'epoch' in [train]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bad.toml"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/out"));
}
