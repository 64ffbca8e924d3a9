// Compiled with nlohmann's JSON_DIAGNOSTICS (CMakeLists.txt), under which GCC 12 reports a false
// -Warray-bounds inside std::map's node allocation; the pragma covers this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Warray-bounds"
#endif
#include "report/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <sstream>

#include <unistd.h>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/limits.hpp"
#include "core/paths.hpp"
#include "core/text_input.hpp"
#include "io/csv.hpp"
#include "report/figures.hpp"

namespace arcal {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* kFn = "arcal report";

// ---------------------------------------------------------------- small helpers

// Values missing from results.json print as "n/a" (a value of the wrong type is an error: num/str).
std::string g(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : std::string("NaN"); }
std::string f4(double v) { return std::isfinite(v) ? fmt::format("{:.4f}", v) : std::string("n/a"); }
std::string pct(double v) { return std::isfinite(v) ? fmt::format("{:.2f} %", 100.0 * v) : std::string("n/a"); }
std::string sgn(double v) { return std::isfinite(v) ? fmt::format("{:+.5f}", v) : std::string("n/a"); }
std::string pval(double p) {
  if (!std::isfinite(p)) return "n/a";
  return p < 1e-3 ? fmt::format("{:.1e}", p) : fmt::format("{:.3f}", p);
}

// The document is built from a mutable copy of results.json: operator[] on a missing key or index
// then yields null instead of undefined behaviour, and a value of the wrong type throws nlohmann's
// type_error, which names its JSON pointer (JSON_DIAGNOSTICS) and becomes an InputError.
/// j[key] as a number; `fallback` when absent or null; type_error when of another type.
double num(const json& j, const char* key, double fallback = NAN) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  return j[key].get<double>();
}
std::string str(const json& j, const char* key, const std::string& fallback = "") {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return fallback;
  return j[key].get<std::string>();
}
std::string ci(const json& a, int digits = 4) {
  if (a.is_null()) return "-";
  if (!a.is_array() || a.size() != 2) throw json::type_error::create(302, "an interval must be [low, high]", &a);
  if (a[0].is_null() || a[1].is_null()) return "-";
  return fmt::format("[{:.{}f}, {:.{}f}]", a[0].get<double>(), digits, a[1].get<double>(), digits);
}
/// An array of results.json to iterate: null (absent) iterates as empty; any other non-array is a
/// type_error naming its JSON pointer (iterating an object or a number would read garbage).
json& arr(json& j) {
  static json empty = json::array();
  if (j.is_null()) return empty;
  if (!j.is_array()) throw json::type_error::create(302, std::string("type must be array, but is ") + j.type_name(), &j);
  return j;
}
/// gnuplot single-quoted string (figures.hpp: quotes doubled, control characters replaced).
std::string q(const std::string& s) { return gnuplot_quote(s); }
/// Histogram bin of v in [lo, hi) with nb bins, clamped; 0 for values that are not finite.
int bin_of(double v, double lo, double hi, int nb) {
  const double x = (v - lo) / (hi - lo) * nb;
  if (!std::isfinite(x) || x < 0) return 0;
  return x >= nb ? nb - 1 : int(x);
}
std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}
/// Short run label: the trace file's stem, or the run id without the dataset prefix.
std::string short_run(const std::string& run) {
  std::string s = fs::path(run).filename().string();
  if (s.size() > 4 && s.substr(s.size() - 4) == ".npz") {
    // runs/<dir>/test.npz: the directory names the run.
    const auto parent = fs::path(run).parent_path().filename().string();
    s = parent.empty() ? s.substr(0, s.size() - 4) : parent;
  }
  return s;
}
std::pair<int, int> grid(std::size_t n) {
  const int cols = n <= 2 ? int(std::max<std::size_t>(n, 1)) : n <= 6 ? 3 : 4;
  return {int((n + std::size_t(cols) - 1) / std::size_t(cols)), cols};
}

// ---------------------------------------------------------------- document model

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
struct Block {
  enum Kind { text, table, figure, pre } kind = text;
  std::string body;  ///< text (plain), pre text, or figure name
  std::string caption;
  Table t;
};
struct Section {
  std::string title;
  std::vector<Block> blocks;
  void p(const std::string& s) { blocks.push_back({Block::text, s, "", {}}); }
  void fig(const std::string& name, const std::string& caption) { blocks.push_back({Block::figure, name, caption, {}}); }
  void tab(Table t, const std::string& caption = "") { blocks.push_back({Block::table, "", caption, std::move(t)}); }
  void code(const std::string& s) { blocks.push_back({Block::pre, s, "", {}}); }
};

void write_csv(const std::string& path, const Table& t) {
  std::ostringstream o;
  for (std::size_t i = 0; i < t.header.size(); ++i) o << (i ? "," : "") << csv_field(t.header[i]);
  o << "\n";
  for (const auto& r : t.rows) {
    for (std::size_t i = 0; i < r.size(); ++i) o << (i ? "," : "") << csv_field(r[i]);
    o << "\n";
  }
  write_file_atomic(path, o.str());
}

// ---------------------------------------------------------------- reliability rows

struct RelRow {
  double conf, acc;
  std::size_t n;
};
std::vector<RelRow> rel_rows(json& rows) {
  std::vector<RelRow> out;
  for (auto& r : arr(rows)) {
    const std::size_t n = r.value("n", std::size_t(0));
    if (n == 0) continue;
    const double c = r.contains("confidence") ? r["confidence"].get<double>() : r.value("conf", 0.0);
    const double a = r.contains("accuracy") ? r["accuracy"].get<double>() : r.value("acc", 0.0);
    out.push_back({c, a, n});
  }
  return out;
}

// ---------------------------------------------------------------- seed summaries

/// Accuracy and ECE of a study's runs per (model, residual mode): mean and sample sd over seeds.
struct SeedSummary {
  std::size_t seeds = 0;
  double accuracy = 0, accuracy_sd = NAN, ece = 0, ece_sd = NAN;
};
std::map<std::string, SeedSummary> seed_summaries(json& study_runs) {
  std::map<std::string, std::vector<std::pair<double, double>>> by;
  for (auto& run : arr(study_runs))
    by[str(run, "model") + " / " + str(run, "residual")].push_back({num(run["metrics"], "accuracy"), num(run["metrics"], "ece")});
  std::map<std::string, SeedSummary> out;
  for (auto& [k, xs] : by) {
    SeedSummary m;
    m.seeds = xs.size();
    for (auto [a, e] : xs) {
      m.accuracy += a / double(xs.size());
      m.ece += e / double(xs.size());
    }
    if (xs.size() > 1) {
      double va = 0, ve = 0;
      for (auto [a, e] : xs) {
        va += (a - m.accuracy) * (a - m.accuracy);
        ve += (e - m.ece) * (e - m.ece);
      }
      m.accuracy_sd = std::sqrt(va / double(xs.size() - 1));
      m.ece_sd = std::sqrt(ve / double(xs.size() - 1));
    }
    out[k] = m;
  }
  return out;
}

// ---------------------------------------------------------------- the writer

class Writer {
 public:
  /// dry: build the whole document (every value read and formatted) but write nothing.
  Writer(std::string fig_dir, bool dry) : fig_dir_(std::move(fig_dir)), dry(dry) {}

  std::vector<std::string> figures;
  std::map<std::string, int> widths;  ///< pixel width per figure (the HTML shows it at most that wide)

  void csv(const std::string& path, const Table& t) {
    if (!dry) write_csv(path, t);
  }

  void render(const std::string& name, const std::string& data, const std::string& body, int w, int h) {
    widths[name] = w;
    if (dry) return;
    // Plain text labels: run and probe names hold underscores, which enhanced mode reads as subscripts.
    auto paths = render_gnuplot_figure(fig_dir_, name, data, "set termoption noenhanced\n" + body, w, h);
    figures.insert(figures.end(), paths.begin(), paths.end());
  }

  /// Reliability diagrams, one panel per run; series: (label, rows).
  void reliability(const std::string& name, const std::string& title,
                   const std::vector<std::pair<std::string, std::vector<std::vector<RelRow>>>>& panels,
                   const std::vector<std::string>& series_names) {
    std::ostringstream d;
    d << "# blocks (index = panel * series + s): mean confidence, accuracy, n per non-empty bin\n";
    for (auto& [label, series] : panels)
      for (auto& rows : series) {
        d << "# " << label << "\n";
        if (rows.empty()) d << "NaN NaN 0\n";
        for (auto& x : rows) d << g(x.conf) << " " << g(x.acc) << " " << x.n << "\n";
        d << "\n\n";
      }
    const auto [rows, cols] = grid(panels.size());
    std::ostringstream b;
    b << "set multiplot layout " << rows << "," << cols << " title " << q(title) << "\n";
    b << "set xrange [0:1]\nset yrange [0:1]\nset xlabel 'confidence'\nset ylabel 'accuracy'\nset grid\n";
    b << "set key top left font ',9'\n";
    const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"};
    const std::size_t ns = series_names.size();
    for (std::size_t i = 0; i < panels.size(); ++i) {
      b << "set title " << q(panels[i].first) << " font ',10'\n";
      b << "plot x with lines dt 2 lc rgb 'gray' title 'perfect'";
      for (std::size_t s = 0; s < ns; ++s)
        b << ", '" << name << ".dat' index " << i * ns + s << " using 1:2 with linespoints pt 7 ps 0.5 lc rgb '"
          << colors[s % 4] << "' title " << q(series_names[s]);
      b << "\n";
    }
    b << "unset multiplot\n";
    render(name, d.str(), b.str(), 360 * cols, 320 * rows + 40);
  }

  std::string fig_dir_;
  bool dry;
};

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

}  // namespace

// ---------------------------------------------------------------- verdict

std::vector<std::string> report_verdict(const json& results) {
  json r = results;  // mutable: see num()
  std::vector<std::string> v;
  // 1. Accuracy and ECE by residual mode.
  if (r.contains("study") && r["study"].contains("runs")) {
    std::string line = "Accuracy / ECE (mean over seeds): ";
    bool first = true;
    for (auto& [k, m] : seed_summaries(r["study"]["runs"])) {
      line += (first ? "" : "; ") + k + " " + pct(m.accuracy) + " / " + f4(m.ece) + " (" + std::to_string(m.seeds) + " seeds)";
      first = false;
    }
    v.push_back(line + ".");
  } else {
    std::size_t n = r.contains("runs") ? r["runs"].size() : 0;
    std::string line = "Audited runs: " + std::to_string(n);
    if (n) {
      double a = 0;
      for (auto& run : arr(r["runs"])) a += num(run, "accuracy") / double(n);
      line += ", mean accuracy " + pct(a);
    }
    v.push_back(line + " (no study section: not written by arcal run).");
  }
  // 2. Diagnostic.
  {
    auto& d = r["diagnostic"];
    const double alpha = num(d, "alpha", 0.05);
    std::size_t raw = 0, holm = 0, bh = 0, m = 0;
    for (auto& t : arr(d["tests"])) {
      ++m;
      raw += num(t, "p") <= alpha;
      holm += num(t, "p_holm") <= alpha;
      bh += num(t, "p_bh") <= alpha;
    }
    std::size_t stable = 0, cells = 0;
    if (d.contains("stability"))
      for (auto& s : arr(d["stability"])) {
        ++cells;
        stable += s.value("stable", false);
      }
    v.push_back(fmt::format("Matched-confidence diagnostic: {} of {} tests reject at alpha = {} raw, {} after Holm, {} after BH "
                            "(R = {} permutations); {} of {} (cell, statistic) pairs stable across seeds.",
                            raw, m, alpha, holm, bh, d.value("permutations", 0), stable, cells));
  }
  // 3. AR-CondCal against the seed band.
  if (r.contains("condcal") && r["condcal"].contains("runs") && !r["condcal"]["runs"].empty()) {
    std::map<std::string, json> band;
    for (auto& b : arr(r["condcal"]["seed_band"])) band[b["cell"].get<std::string>()] = b["cv_nll"]["ece"];
    std::size_t beyond = 0, total = 0;
    double probe = 0, conf = 0;
    for (auto& e : arr(r["condcal"]["runs"])) {
      auto& arms = e["rules"]["cv_nll"];
      const double p = num(arms["probe"], "ece"), c = num(arms["confidence_only"], "ece");
      probe += p;
      conf += c;
      ++total;
      auto& b = band[e["cell"].get<std::string>()];
      const double lo = num(b, "mean") - num(b, "sd", 0.0);
      if (p < lo) ++beyond;
    }
    v.push_back(fmt::format("AR-CondCal (CV-NLL bandwidth): probe ECE {:.4f} vs confidence-only {:.4f} (mean over {} run x "
                            "statistic entries); {} below the confidence-only seed band (mean - sd).",
                            probe / double(total), conf / double(total), total, beyond));
  } else {
    v.push_back("AR-CondCal: not run.");
  }
  // 4. Probes.
  if (r.contains("probes") && r["probes"].contains("tests")) {
    std::string line = "Probes (log-loss gain over control, random-effects mean over runs [95 % CI]): ";
    bool first = true;
    for (auto& t : arr(r["probes"]["tests"])) {
      if (t.value("metric", "") != "log_loss") continue;
      const std::string c = t["comparison"].get<std::string>();
      if (c != "full_vector_vs_capacity_matched" && c != "full_vector_vs_shuffled_within_bins" &&
          c != "full_logit_routing_vs_full_logit")
        continue;
      line += (first ? "" : "; ") + c + " " + sgn(-num(t, "mean_delta")) + " [" + sgn(-t["ci"][1].get<double>()) + ", " +
              sgn(-t["ci"][0].get<double>()) + "], " + str(t, "verdict") + " (Holm p " + pval(num(t, "p_holm")) +
              "; runs whose own interval lies above 0: " + std::to_string(t.value("runs_better", 0)) + "/" +
              std::to_string(t.value("runs", 0)) + ", a count, not a test)";
      first = false;
    }
    v.push_back(line + ".");
  } else {
    v.push_back("Probes: not run.");
  }
  // 5. Sensitivity and exact null.
  std::string line;
  if (r.contains("sensitivity")) {
    auto& s = r["sensitivity"];
    for (auto& x : arr(s["verdicts"]))
      if (x["probe"] == "full_vector")
        line += fmt::format("Sensitivity: the full-vector probe recovers R = {:+.2f} {} of an injected {} nats ({} the {} "
                            "threshold: a null result would read '{}')",
                            num(x, "recovery"), ci(x["recovery_ci"], 2), num(s, "threshold_effect"),
                            num(x, "recovery") >= num(s, "threshold") ? "meets" : "misses", num(s, "threshold"),
                            x.value("verdict", ""));
  } else {
    line += "Sensitivity: not run";
  }
  if (r.contains("exact_null")) {
    for (auto& p : arr(r["exact_null"]["pooled"]))
      if (p["comparison"] == "full_vector_vs_capacity_matched")
        line += fmt::format("; exact null, conditional permutation ({}): real gain {:+.5f}, null q95 {:+.5f}, p = {:.3f}",
                            p.value("variant", ""), num(p, "real_mean_gain"), num(p, "null_q95"), num(p, "p"));
  } else {
    line += "; exact null: not run";
  }
  v.push_back(line + ".");
  return v;
}

// ---------------------------------------------------------------- report

namespace {

/// Builds the whole report from `r` (a mutable copy of results.json, see num()) into out_dir. With a
/// dry writer nothing is written, but every value is read and formatted, so a wrong type surfaces
/// before any file exists.
void build_report(json& r, const std::string& path, const std::string& out_dir, Writer& w, ReportOutput& out) {
  const std::string figdir = out_dir + "/figures", tabdir = out_dir + "/tables";
  if (!w.dry) {
    std::error_code ec;
    fs::create_directories(figdir, ec);
    if (!ec) fs::create_directories(tabdir, ec);
    if (ec) throw_input(kFn, "cannot create " + out_dir + ": " + ec.message());
  }
  std::vector<Section> secs;
  const bool has_study = r.contains("study");
  json empty = json::array();
  json& summaries = r.contains("runs") ? r["runs"] : empty;

  // ---- Summary
  Section head{"Summary", {}};
  out.verdict = report_verdict(r);
  {
    Table t{{"", "verdict"}, {}};
    for (std::size_t i = 0; i < out.verdict.size(); ++i) t.rows.push_back({std::to_string(i + 1), out.verdict[i]});
    head.tab(t);
  }
  std::string prov = "arcal " + (has_study ? str(r["study"], "version", "?") : std::string(ARCAL_VERSION)) +
                     "; results: " + path + "; report generated " + now_utc() + ".";
  if (has_study) {
    std::string seeds;
    std::map<std::string, bool> seen;
    for (auto& run : arr(r["study"]["runs"])) {
      const auto s = std::to_string(run["seed"].get<std::uint64_t>());
      if (!seen[s]) seeds += (seeds.empty() ? "" : ", ") + s;
      seen[s] = true;
    }
    prov += " Study '" + str(r["study"], "name") + "' (" + str(r["study"], "config_source") + "), configuration hash " +
            str(r["study"], "config_hash") + ", training seeds " + seeds + ", audit seed " +
            std::to_string(r["diagnostic"].value("seed", 0)) + ".";
  } else {
    prov += " Audit seed " + std::to_string(r["diagnostic"].value("seed", 0)) + ".";
  }
  head.p(prov);
  secs.push_back(head);

  // ---- Training runs
  if (has_study) {
    Section s{"Training runs: AttnRes and the standard twin", {}};
    Table t{{"run", "residual", "seed", "n", "accuracy", "95 % CI", "ECE-15", "95 % CI", "NLL", "Brier", "AUROC", "train s"}, {}};
    for (auto& run : arr(r["study"]["runs"])) {
      auto& m = run["metrics"];
      t.rows.push_back({run["id"].get<std::string>(), run["residual"].get<std::string>(), std::to_string(run["seed"].get<std::uint64_t>()),
                        std::to_string(m.value("n", 0)), f4(num(m, "accuracy")), ci(m["ci"]["accuracy"]), f4(num(m, "ece")),
                        ci(m["ci"]["ece"]), f4(num(m, "nll")), f4(num(m, "brier")), f4(num(m, "auroc")),
                        fmt::format("{:.0f}", num(run, "train_seconds", 0))});
    }
    s.tab(t, "Metrics of every trained run on its traced " + str(r["study"], "split", "test") +
                 " split (95 % percentile bootstrap over examples, 1000 resamples).");
    // Mean and sd over seeds per (model, residual mode): the AttnRes vs standard-twin comparison.
    Table m{{"model / residual", "seeds", "accuracy mean", "sd", "ECE-15 mean", "sd"}, {}};
    for (auto& [k, x] : seed_summaries(r["study"]["runs"]))
      m.rows.push_back({k, std::to_string(x.seeds), f4(x.accuracy), x.seeds > 1 ? f4(x.accuracy_sd) : "-", f4(x.ece),
                        x.seeds > 1 ? f4(x.ece_sd) : "-"});
    s.tab(m, "Across seeds (sample sd).");
    w.csv(tabdir + "/training.csv", t);
    out.tables.push_back(tabdir + "/training.csv");
    std::vector<std::pair<std::string, std::vector<std::vector<RelRow>>>> panels;
    for (auto& run : arr(r["study"]["runs"])) panels.push_back({run["id"].get<std::string>(), {rel_rows(run["metrics"]["reliability"])}});
    w.reliability("reliability_runs", "Reliability per run (15 equal-width bins)", panels, {"accuracy per bin"});
    s.fig("reliability_runs", "Reliability diagram of every run (AttnRes and standard twins).");
    secs.push_back(s);
  } else if (!summaries.empty()) {
    Section s{"Runs", {}};
    Table t{{"run", "n", "accuracy", "mean confidence", "ECE"}, {}};
    std::vector<std::pair<std::string, std::vector<std::vector<RelRow>>>> panels;
    for (auto& run : arr(summaries)) {
      t.rows.push_back({short_run(run["run"]), std::to_string(run.value("n", 0)), f4(num(run, "accuracy")),
                        f4(num(run, "mean_confidence")), f4(num(run, "ece"))});
      panels.push_back({short_run(run["run"]), {rel_rows(run["reliability"])}});
    }
    s.tab(t);
    w.reliability("reliability_runs", "Reliability per run (15 equal-width bins)", panels, {"accuracy per bin"});
    s.fig("reliability_runs", "Reliability diagram of every audited run.");
    secs.push_back(s);
  }

  // ---- Routing: tertile reliability and heatmaps
  if (!summaries.empty()) {
    Section s{"Routing", {}};
    std::vector<std::pair<std::string, std::vector<std::vector<RelRow>>>> panels;
    Table t{{"run", "statistic", "tertile", "n", "accuracy", "ECE"}, {}};
    for (auto& run : arr(summaries)) {
      if (!run.contains("tertiles") || run["tertiles"].empty()) continue;
      std::vector<std::vector<RelRow>> series;
      for (auto& te : arr(run["tertiles"])) {
        series.push_back(rel_rows(te["reliability"]));
        t.rows.push_back({short_run(run["run"]), str(run, "tertile_statistic"), str(te, "tertile"), std::to_string(te.value("n", 0)),
                          f4(num(te, "accuracy")), f4(num(te, "ece"))});
      }
      panels.push_back({short_run(run["run"]) + " by " + str(run, "tertile_statistic"), series});
    }
    if (!panels.empty()) {
      w.reliability("reliability_tertiles", "Reliability per routing tertile", panels, {"low", "middle", "high"});
      s.fig("reliability_tertiles",
            "Reliability within the low, middle and high tertile of the first audited routing statistic (tertiles of the "
            "whole run; ties kept together).");
      s.tab(t);
      w.csv(tabdir + "/tertiles.csv", t);
      out.tables.push_back(tabdir + "/tertiles.csv");
    }
    // Heatmaps
    std::ostringstream d;
    std::vector<std::string> labels;
    std::size_t max_s = 0, max_p = 0;
    for (auto& run : arr(summaries)) {
      if (!run.contains("routing_mean") || run["routing_mean"].is_null()) continue;
      auto& rm = run["routing_mean"];
      auto& mean = rm["mean"];
      auto& src = rm["sources"];
      d << "# " << short_run(run["run"]) << ": point source mean_weight (NaN past the point's source count)\n";
      for (std::size_t p = 0; p < mean.size(); ++p) {
        for (std::size_t i = 0; i < mean[p].size(); ++i) {
          const bool valid = int(i) < src[p].get<int>();
          d << p << " " << i << " " << (valid ? g(mean[p][i].get<double>()) : std::string("NaN")) << "\n";
          max_s = std::max(max_s, mean[p].size());
        }
        d << "\n";
      }
      max_p = std::max(max_p, mean.size());
      d << "\n";
      labels.push_back(short_run(run["run"]));
    }
    if (!labels.empty()) {
      const auto [rows, cols] = grid(labels.size());
      std::ostringstream b;
      b << "set multiplot layout " << rows << "," << cols << " title 'Mean routing weight (token mean, averaged over examples)'\n";
      b << "set palette defined (0 '#ffffff', 0.25 '#c6dbef', 0.5 '#6baed6', 0.75 '#2171b5', 1 '#08306b')\n";
      b << "set cbrange [0:1]\nset xlabel 'source i (0 = embedding)'\nset ylabel 'routing point p'\n";
      b << "set xrange [-0.5:" << double(max_s) - 0.5 << "]\nset yrange [" << double(max_p) - 0.5 << ":-0.5]\n";
      for (std::size_t i = 0; i < labels.size(); ++i)
        b << "set title " << q(labels[i]) << " font ',10'\nplot 'routing_heatmap.dat' index " << i << " using 2:1:3 with image notitle\n";
      b << "unset multiplot\n";
      w.render("routing_heatmap", d.str(), b.str(), 420 * cols, 380 * rows + 40);
      s.fig("routing_heatmap", "Mean routing weights per routing point (rows) and source (columns); blank cells are past the "
                               "point's number of sources.");
    }
    if (!s.blocks.empty()) secs.push_back(s);
  }

  // ---- Diagnostic
  {
    auto& d = r["diagnostic"];
    Section s{"Matched-confidence diagnostic", {}};
    s.p(fmt::format("Family of {} declared tests (run x statistic); {} {} confidence bins (bins with fewer than {} examples "
                    "dropped); R = {} permutations; alpha = {}. Decision: residuals a - q(c) against a cross-fitted "
                    "isotonic q, routing permuted within ~{}-example strata of confidence (a conditional permutation "
                    "test that holds its level when routing tracks confidence). The paper's protocol (a - c, "
                    "within-bin permutation) is shown beside it, never the decision: it rejects falsely when routing "
                    "tracks confidence inside a bin and the model is miscalibrated.",
                    d.value("family_size", 0), d.value("bins", 0), str(d, "binning"), d.value("min_bin_count", 0),
                    d.value("permutations", 0), num(d, "alpha"), d.value("strata_size", 20)));
    Table t{{"#", "run", "statistic", "n used", "gap G_r", "p", "p Holm", "p BH", "paper G", "paper p", "paper p Holm"}, {}};
    std::ostringstream hist, pv;
    pv << "# index label p p_holm p_bh\n";
    std::size_t i = 0;
    std::vector<std::string> titles;
    std::vector<double> gaps;
    for (auto& te : arr(d["tests"])) {
      ++i;
      const bool has_paper = te.contains("paper");
      t.rows.push_back({std::to_string(i), short_run(te["run"]), str(te, "statistic"), std::to_string(te.value("n_used", 0)),
                        fmt::format("{:+.5f}", num(te, "gap")), pval(num(te, "p")), pval(num(te, "p_holm")), pval(num(te, "p_bh")),
                        has_paper ? fmt::format("{:+.5f}", num(te["paper"], "gap")) : "-",
                        has_paper ? pval(num(te["paper"], "p")) : "-", has_paper ? pval(num(te["paper"], "p_holm")) : "-"});
      pv << i << " \"" << i << ":" << str(te, "statistic") << "\" " << g(num(te, "p")) << " "
         << g(num(te, "p_holm")) << " " << g(num(te, "p_bh")) << "\n";
      hist << "# test " << i << ": bin centre, count\n";
      if (te.contains("null_histogram")) {
        auto& e = te["null_histogram"]["edges"];
        auto& c = te["null_histogram"]["counts"];
        for (std::size_t b = 0; b < c.size(); ++b)
          hist << g(0.5 * (e[b].get<double>() + e[b + 1].get<double>())) << " " << c[b].get<std::size_t>() << "\n";
      } else {
        hist << "NaN 0\n";
      }
      hist << "\n\n";
      titles.push_back(fmt::format("#{} {} {}: p = {}", i, short_run(te["run"]), str(te, "statistic"), pval(num(te, "p"))));
      gaps.push_back(num(te, "gap"));
    }
    s.tab(t, "p: the decision test's conditional permutation p; Holm and Benjamini-Hochberg adjustments over the whole "
             "family. paper: the seed paper's protocol (reported, not the decision).");
    w.csv(tabdir + "/diagnostic.csv", t);
    out.tables.push_back(tabdir + "/diagnostic.csv");
    if (i > 0) {
      const auto [rows, cols] = grid(i);
      std::ostringstream b;
      b << "set multiplot layout " << rows << "," << cols << " title 'Permutation null of the weighted gap G (red: observed)'\n";
      b << "set style fill solid 0.6 border -1\nset xlabel 'G*'\nset ylabel 'count'\nset format x '%.3f'\nset xtics rotate by -30 font ',8'\n";
      for (std::size_t k = 0; k < i; ++k) {
        b << "set title " << q(titles[k]) << " font ',9'\nunset arrow\n";
        b << "set arrow from " << g(gaps[k]) << ", graph 0 to " << g(gaps[k]) << ", graph 1 nohead lw 2 lc rgb '#d62728' front\n";
        b << "plot 'diagnostic_null.dat' index " << k << " using 1:2 with boxes lc rgb '#6baed6' notitle\n";
      }
      b << "unset multiplot\n";
      w.render("diagnostic_null", hist.str(), b.str(), 380 * cols, 300 * rows + 40);
      s.fig("diagnostic_null", "Permutation null histogram of each test with its observed gap.");
      std::ostringstream b2;
      b2 << "set title 'Diagnostic p-values (-log10), raw and adjusted'\nset style data histogram\n"
            "set style histogram cluster gap 1\nset style fill solid 0.8 border -1\nset ylabel '-log10 p'\nset yrange [0:*]\n"
            "set key top right\nset grid y\nset xtics rotate by -30 font ',9'\n"
            "plot 'diagnostic_pvalues.dat' using (-log10($3)):xtic(2) title 'raw', '' using (-log10($4)) title 'Holm', "
            "'' using (-log10($5)) title 'BH', "
         << g(-std::log10(num(d, "alpha", 0.05))) << " with lines lw 2 dt 2 lc rgb '#d62728' title 'alpha'\n";
      w.render("diagnostic_pvalues", pv.str(), b2.str(), std::max(600, int(60 * i + 200)), 420);
      s.fig("diagnostic_pvalues", "p-values of the family (bars above the dashed line reject at alpha).");
    }
    if (d.contains("stability")) {
      Table st{{"cell", "statistic", "seeds", "rejections (raw p)", "positive", "negative", "verdict"}, {}};
      for (auto& v : arr(d["stability"]))
        st.rows.push_back({str(v, "cell"), str(v, "statistic"), std::to_string(v.value("seeds", 0)), std::to_string(v.value("rejections", 0)),
                           std::to_string(v.value("rejections_positive", 0)), std::to_string(v.value("rejections_negative", 0)),
                           v.contains("verdict") ? str(v, "verdict") : (v.value("stable", false) ? "stable" : "not stable")});
      s.tab(st, "Cross-seed stability: " + str(d, "stability_rule"));
    }
    secs.push_back(s);
  }

  // ---- AR-CondCal
  if (r.contains("condcal") && r["condcal"].contains("runs") && !r["condcal"]["runs"].empty()) {
    auto& c = r["condcal"];
    Section s{"AR-CondCal", {}};
    const std::vector<std::string> arms = {"probe", "confidence_only", "predictive_entropy", "shuffled_within_bins"};
    Table t{{"run", "statistic", "rule", "arm", "ECE", "worst-tertile ECE", "NLL", "Brier", "multiples"}, {}};
    std::map<std::string, json> band;
    for (auto& b : arr(c["seed_band"])) band[b["cell"].get<std::string>()] = b["cv_nll"];
    std::ostringstream pts, bnd;
    pts << "# x probe_ece conf_ece pe_ece shuf_ece uncal_ece probe_wt conf_wt pe_wt shuf_wt uncal_wt\n";
    bnd << "# x band_ece_lo band_ece_hi band_wt_lo band_wt_hi (confidence-only, mean -/+ sd over seeds)\n";
    std::string xtics;
    std::size_t x = 0;
    for (auto& e : arr(c["runs"])) {
      ++x;
      for (const char* rule : {"cv_nll", "oracle_ece"})
        for (auto& a : arms) {
          auto& sc = e["rules"][rule][a];
          t.rows.push_back({short_run(e["run"]), str(e, "statistic"), rule, a, f4(num(sc, "ece")), f4(num(sc, "worst_tertile_ece")),
                            f4(num(sc, "nll")), f4(num(sc, "brier")), sc.contains("multiple") ? sc["multiple"].dump() : ""});
        }
      auto& cv = e["rules"]["cv_nll"];
      pts << x;
      for (const char* metric : {"ece", "worst_tertile_ece"}) {
        for (auto& a : arms) pts << " " << g(num(cv[a], metric));
        pts << " " << g(num(e["uncalibrated"], metric));
      }
      pts << "\n";
      auto& b = band[str(e, "cell")];
      for (double dx : {-0.45, 0.45}) {
        bnd << g(double(x) + dx);
        for (const char* metric : {"ece", "worst_tertile_ece"})
          bnd << " " << g(num(b[metric], "mean") - num(b[metric], "sd", 0)) << " " << g(num(b[metric], "mean") + num(b[metric], "sd", 0));
        bnd << "\n";
      }
      bnd << "\n";
      xtics += (xtics.empty() ? "" : ", ") + q(std::to_string(x) + ":" + str(e, "statistic")) + " " + std::to_string(x);
    }
    s.tab(t, "Per run and statistic: the AR-CondCal probe (logit c, routing statistic) and its matched controls under the "
             "CV-NLL and oracle-ECE bandwidth rules (fold means over the two cross-fit halves).");
    w.csv(tabdir + "/condcal.csv", t);
    out.tables.push_back(tabdir + "/condcal.csv");
    {
      std::ostringstream b;
      b << "set multiplot layout 1,2 title 'AR-CondCal (CV-NLL bandwidth) against the seed-variance band'\n";
      b << "set xtics (" << xtics << ") rotate by -30 font ',9'\nset xrange [0.4:" << double(x) + 0.6 << "]\nset grid y\n"
        << "set key outside bottom center horizontal font ',9'\n";
      const char* names[] = {"ECE", "worst-tertile ECE"};
      for (int m = 0; m < 2; ++m) {
        const int off = 2 + m * 5;
        b << "set title '" << names[m] << "'\nset ylabel '" << names[m] << "'\n";
        b << "plot 'condcal_band.dat' index 1 using 1:" << 2 + 2 * m << ":" << 3 + 2 * m
          << " with filledcurves fc rgb '#dddddd' title 'seed band (confidence-only)', "
          << "'' index 0 using ($1-0.2):" << off << " with points pt 7 ps 1.2 lc rgb '#d62728' title 'probe', "
          << "'' index 0 using ($1-0.1):" << off + 1 << " with points pt 5 lc rgb '#1f77b4' title 'confidence-only', "
          << "'' index 0 using ($1):" << off + 2 << " with points pt 9 lc rgb '#2ca02c' title 'predictive entropy', "
          << "'' index 0 using ($1+0.1):" << off + 3 << " with points pt 11 lc rgb '#9467bd' title 'shuffled within bins', "
          << "'' index 0 using ($1+0.2):" << off + 4 << " with points pt 2 lc rgb 'black' title 'uncalibrated'\n";
      }
      b << "unset multiplot\n";
      w.render("condcal_band", pts.str() + "\n\n" + bnd.str(), b.str(), 1100, 520);
      s.fig("condcal_band", "AR-CondCal probe and controls per run x statistic (x axis) against the band mean +/- sd of the "
                            "confidence-only control over the seeds of the cell.");
    }
    // Bandwidth sensitivity: scores per Scott multiple, averaged over entries.
    if (c.contains("multiples") && c["runs"][0]["rules"].contains("scott_multiples")) {
      const auto mult = c["multiples"].get<std::vector<double>>();
      std::ostringstream d;
      d << "# multiple, then ECE and NLL of probe, confidence_only, predictive_entropy, shuffled_within_bins (mean over "
        << c["runs"].size() << " run x statistic entries)\n";
      for (std::size_t m = 0; m < mult.size(); ++m) {
        d << g(mult[m]);
        for (const char* metric : {"ece", "nll"})
          for (auto& a : arms) {
            double v = 0;
            for (auto& e : arr(c["runs"])) v += num(e["rules"]["scott_multiples"][a][m], metric) / double(c["runs"].size());
            d << " " << g(v);
          }
        d << "\n";
      }
      std::ostringstream b;
      b << "set multiplot layout 1,2 title 'Bandwidth sensitivity (fixed Scott multiples)'\nset logscale x 2\nset grid\n"
           "set xlabel 'Scott multiple m'\nset key top left font ',9'\n";
      const char* names[] = {"ECE", "binary NLL"};
      for (int m = 0; m < 2; ++m) {
        b << "set title '" << names[m] << "'\nset ylabel '" << names[m] << "'\nplot ";
        for (std::size_t a = 0; a < arms.size(); ++a)
          b << (a ? ", " : "") << "'condcal_bandwidth.dat' using 1:" << 2 + m * 4 + int(a) << " with linespoints pt 7 title "
            << q(arms[a]);
        b << "\n";
      }
      b << "unset multiplot\n";
      w.render("condcal_bandwidth", d.str(), b.str(), 1000, 420);
      s.fig("condcal_bandwidth", "ECE and NLL of the probe and controls at each fixed Scott bandwidth multiple.");
    }
    secs.push_back(s);
  }

  // ---- Probes
  if (r.contains("probes") && r["probes"].contains("runs")) {
    auto& p = r["probes"];
    Section s{"MLP probes and controls", {}};
    Table tt{{"comparison", "metric", "gain (random-effects mean)", "95 % CI", "p", "p Holm", "p Wilcoxon (min)", "p sign",
              "runs with interval above/below 0", "verdict"}, {}};
    for (auto& t : arr(p["tests"]))
      tt.rows.push_back({str(t, "comparison"), str(t, "metric"), sgn(-num(t, "mean_delta")),
                         fmt::format("[{}, {}]", sgn(-t["ci"][1].get<double>()), sgn(-t["ci"][0].get<double>())),
                         pval(num(t, "p")), pval(num(t, "p_holm")),
                         fmt::format("{} ({})", pval(num(t, "p_wilcoxon")), pval(num(t, "p_rank_min"))),
                         pval(num(t, "p_sign")), fmt::format("{}/{}", t.value("runs_better", 0), t.value("runs_worse", 0)),
                         str(t, "verdict")});
    s.p("Gain = control's loss minus the probe's (positive: the probe is better). Per run: the mean over repeated "
        "cross-fit splits with the Nadeau-Bengio corrected interval. Across runs: random-effects (Hartung-Knapp) "
        "mean, interval and p; Holm over the whole probe family decides the verdict. Wilcoxon and sign tests are shown "
        "with the smallest p they can reach with this many runs. Run counts are counts, not tests.");
    if (auto& tests = arr(p["tests"]); !tests.empty() && tests[0].contains("power_note"))
      s.p("Power: " + str(tests[0], "power_note") + ".");
    s.tab(tt);
    w.csv(tabdir + "/probe_tests.csv", tt);
    out.tables.push_back(tabdir + "/probe_tests.csv");
    Table tp{{"run", "probe", "inputs", "parameters", "log-loss", "Brier", "ECE", "mean epochs"}, {}};
    for (auto& run : arr(p["runs"]))
      for (auto& [name, pr] : run["probes"].items())
        tp.rows.push_back({short_run(run["run"]), name, std::to_string(pr.value("inputs", 0)), std::to_string(pr.value("parameters", 0)),
                           f4(num(pr, "log_loss")), f4(num(pr, "brier")), f4(num(pr, "ece")), fmt::format("{:.1f}", num(pr, "mean_epochs"))});
    w.csv(tabdir + "/probes.csv", tp);
    out.tables.push_back(tabdir + "/probes.csv");
    // Figure: log-loss gain per comparison and run with CI, plus the across-run mean.
    std::ostringstream d0, d1;
    d0 << "# y gain ci_low ci_high (per run, paired bootstrap)\n";
    d1 << "# y mean_gain ci_low ci_high (across runs)\n";
    std::vector<std::string> comps;
    for (auto& t : arr(p["tests"]))
      if (str(t, "metric") == "log_loss") comps.push_back(str(t, "comparison"));
    const std::size_t nr = p["runs"].size();
    for (std::size_t ci_ = 0; ci_ < comps.size(); ++ci_) {
      std::size_t ri = 0;
      for (auto& run : arr(p["runs"])) {
        for (auto& c : arr(run["comparisons"]))
          if (str(c, "name") == comps[ci_]) {
            const double y = double(ci_ + 1) + 0.25 * (double(ri) - double(nr - 1) / 2.0) / std::max<double>(1.0, double(nr));
            d0 << g(y) << " " << g(-num(c["log_loss"], "delta")) << " " << g(-c["log_loss"]["ci"][1].get<double>()) << " "
               << g(-c["log_loss"]["ci"][0].get<double>()) << "\n";
          }
        ++ri;
      }
      for (auto& t : arr(p["tests"]))
        if (str(t, "metric") == "log_loss" && str(t, "comparison") == comps[ci_])
          d1 << g(double(ci_ + 1) - 0.3) << " " << g(-num(t, "mean_delta")) << " " << g(-t["ci"][1].get<double>()) << " "
             << g(-t["ci"][0].get<double>()) << "\n";
    }
    std::string ytics;
    for (std::size_t k = 0; k < comps.size(); ++k) ytics += (k ? ", " : "") + q(comps[k]) + " " + std::to_string(k + 1);
    std::ostringstream b;
    b << "set title 'Probe log-loss gain over its control (positive: probe better)'\nset ytics (" << ytics
      << ") font ',9'\nset yrange [0.4:" << double(comps.size()) + 0.6 << "]\nset xlabel 'gain [nats]'\nset grid x\n"
      << "set arrow from 0, graph 0 to 0, graph 1 nohead dt 2\nset key outside top center horizontal font ',9'\nset lmargin 38\n"
      << "plot 'probe_gains.dat' index 0 using 2:1:3:4 with xerrorbars pt 7 ps 0.6 lc rgb '#1f77b4' title 'per run (95 % CI)', "
      << "'' index 1 using 2:1:3:4 with xerrorbars pt 5 ps 0.9 lc rgb '#d62728' title 'mean over runs (95 % CI)'\n";
    w.render("probe_gains", d0.str() + "\n\n" + d1.str(), b.str(), 1000, 120 + 60 * int(comps.size()));
    s.fig("probe_gains", "Log-loss gain of each probe over its matched control: per run with its paired bootstrap interval, "
                         "and the mean over runs with the across-run interval.");
    secs.push_back(s);
  }

  // ---- Sensitivity
  if (r.contains("sensitivity")) {
    auto& se = r["sensitivity"];
    Section s{"Sensitivity (injection) audit", {}};
    s.p(fmt::format("{} runs x {} synthetic label draws per effect; every probe refitted. Recovery R = (loss of the reference q(c) "
                    "- loss of the probe) / oracle gain. Threshold R >= {} at {} nats.",
                    se["runs"].size(), se.value("draws", 0), num(se, "threshold"), num(se, "threshold_effect")));
    Table t{{"effect [nats]", "probe", "R", "95 % CI", "gain [nats]", "95 % CI"}, {}};
    std::vector<std::string> probes;
    for (auto& e : arr(se["by_effect"]))
      for (auto& [name, pr] : e["probes"].items()) {
        if (std::find(probes.begin(), probes.end(), name) == probes.end()) probes.push_back(name);
        t.rows.push_back({g(num(e, "effect_nats")), name, pr.contains("recovery") ? fmt::format("{:+.3f}", num(pr, "recovery")) : "-",
                          pr.contains("recovery_ci") ? ci(pr["recovery_ci"], 3) : "-", sgn(num(pr, "gain")), ci(pr["gain_ci"], 5)});
      }
    s.tab(t);
    w.csv(tabdir + "/sensitivity.csv", t);
    out.tables.push_back(tabdir + "/sensitivity.csv");
    Table v{{"probe", "R at threshold effect", "95 % CI", "verdict"}, {}};
    for (auto& x : arr(se["verdicts"]))
      v.rows.push_back({str(x, "probe"), fmt::format("{:+.3f}", num(x, "recovery")), ci(x["recovery_ci"], 3), str(x, "verdict")});
    s.tab(v, "Verdict on the real labels: 'absent' only where the audit would have seen the threshold effect.");
    std::ostringstream d;
    for (auto& name : probes) {
      d << "# " << name << ": effect R ci_low ci_high\n";
      bool any = false;
      for (auto& e : arr(se["by_effect"])) {
        auto& pr = e["probes"];
        if (!pr.contains(name) || !pr[name].contains("recovery") || pr[name]["recovery"].is_null()) continue;
        d << g(num(e, "effect_nats")) << " " << g(num(pr[name], "recovery")) << " " << g(pr[name]["recovery_ci"][0].get<double>())
          << " " << g(pr[name]["recovery_ci"][1].get<double>()) << "\n";
        any = true;
      }
      if (!any) d << "NaN NaN NaN NaN\n";
      d << "\n\n";
    }
    std::ostringstream b;
    b << "set title 'Injection recovery R against the injected oracle gain'\nset xlabel 'injected effect [nats]'\n"
         "set ylabel 'recovery R'\nset logscale x\nset grid\nset key outside right font ',9'\nset yrange [*:1.15]\n"
      << "set arrow from graph 0, first " << g(num(se, "threshold")) << " to graph 1, first " << g(num(se, "threshold"))
      << " nohead dt 2 lc rgb '#d62728'\nplot ";
    for (std::size_t k = 0; k < probes.size(); ++k)
      b << (k ? ", " : "") << "'sensitivity_recovery.dat' index " << k << " using ($1*(1+0.02*" << int(k) - int(probes.size() / 2)
        << ")):2:3:4 with yerrorlines pt 7 ps 0.6 title " << q(probes[k]);
    b << "\n";
    w.render("sensitivity_recovery", d.str(), b.str(), 1000, 480);
    s.fig("sensitivity_recovery", "Recovery of each probe (95 % bootstrap interval over runs x draws); dashed: the detection threshold.");
    secs.push_back(s);
  }

  // ---- Exact null
  if (r.contains("exact_null")) {
    auto& x = r["exact_null"];
    Section s{"Exact-null audit", {}};
    s.p(fmt::format("Decision null: the routing profile permuted within matched groups of about {} examples whose outputs are "
                    "nearly identical (confidence: logit c; full_logit: the routing profile as predicted from the sorted probabilities, "
                    "and P(correct) as predicted from the logits), the real labels kept, every "
                    "probe that reads the profile refitted ({} replicates per run and variant). Monte-Carlo p = (1 + #{{null >= real}}) "
                    "/ (R + 1). It holds whatever P(correct | outputs) looks like, up to the matching resolution below. The "
                    "full_logit variant held its level on the validated families except one: routing that tracks a nonlinear "
                    "function of the outputs which correctness also depends on, where it rejected 6 of 40 null runs at 0.05 "
                    "(docs/audit_validation.md); read a small full_logit p with that in mind.",
                    x.value("group_size", 5), x.value("replicates", 0)));
    {
      Table mt{{"run", "variant", "groups", "mean within-group distance", "random-pair distance"}, {}};
      for (auto& run : arr(x["runs"]))
        if (run.contains("matching"))
          mt.rows.push_back({short_run(run["run"]), str(run, "variant"), std::to_string(run["matching"].value("groups", 0)),
                             fmt::format("{:.3g}", num(run["matching"], "mean_distance")),
                             fmt::format("{:.3g}", num(run["matching"], "random_pair_distance"))});
      if (!mt.rows.empty()) s.tab(mt, "Matching resolution (in the matching space's units).");
    }
    if (x.contains("model_based")) {
      Table mb{{"variant", "comparison", "runs", "real mean gain", "null q95", "p (model-based)"}, {}};
      for (auto& p : arr(x["model_based"]["pooled"]))
        mb.rows.push_back({str(p, "variant"), str(p, "comparison"), std::to_string(p.value("runs", 0)),
                           sgn(num(p, "real_mean_gain")), sgn(num(p, "null_q95")), pval(num(p, "p"))});
      Table fitt{{"run", "variant", "Hosmer-Lemeshow", "df", "p"}, {}};
      for (auto& run : arr(x["model_based"]["runs"]))
        fitt.rows.push_back({short_run(run["run"]), str(run, "variant"), fmt::format("{:.1f}", num(run["reference_fit"], "statistic")),
                             fmt::format("{:.0f}", num(run["reference_fit"], "df")), pval(num(run["reference_fit"], "p"))});
      s.tab(mb, "Model-based null (labels drawn from a fitted reference): shown, not the decision; valid only if the "
                "reference is right.");
      s.tab(fitt, "Goodness of fit of the model-based null's reference on held-out halves (small p: misspecified).");
    }
    Table t{{"variant", "comparison", "runs", "real mean gain", "null mean", "null q95", "p"}, {}};
    for (auto& p : arr(x["pooled"]))
      t.rows.push_back({str(p, "variant"), str(p, "comparison"), std::to_string(p.value("runs", 0)), sgn(num(p, "real_mean_gain")),
                        sgn(num(p, "null_mean")), sgn(num(p, "null_q95")), pval(num(p, "p"))});
    s.tab(t, "Pooled over runs: replicate j's mean gain over runs is one draw of the null of the mean gain.");
    w.csv(tabdir + "/exact_null.csv", t);
    out.tables.push_back(tabdir + "/exact_null.csv");
    // Pooled null per (variant, comparison): mean over runs of replicate j's gain.
    std::map<std::pair<std::string, std::string>, std::vector<std::vector<double>>> nulls;
    for (auto& run : arr(x["runs"]))
      for (auto& c : arr(run["comparisons"]))
        nulls[{str(run, "variant"), str(c, "comparison")}].push_back(c["null_gain"].get<std::vector<double>>());
    std::ostringstream d;
    std::vector<std::string> titles;
    std::vector<double> reals;
    for (auto& p : arr(x["pooled"])) {
      auto& runs = nulls[{str(p, "variant"), str(p, "comparison")}];
      if (runs.empty()) continue;
      std::vector<double> pooled(runs[0].size(), 0.0);
      for (auto& v : runs)
        for (std::size_t j = 0; j < pooled.size() && j < v.size(); ++j) pooled[j] += v[j] / double(runs.size());
      const double real = num(p, "real_mean_gain");
      double lo = real, hi = real;
      for (double v : pooled) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      const double pad = std::max(1e-9, 0.05 * (hi - lo));
      lo -= pad;
      hi += pad;
      const int nb = int(std::clamp<std::size_t>(pooled.size() / 4, 5, 30));
      std::vector<int> cnt(nb, 0);
      for (double v : pooled) cnt[std::size_t(bin_of(v, lo, hi, nb))]++;
      d << "# " << str(p, "variant") << " " << str(p, "comparison") << ": bin centre, count\n";
      for (int k = 0; k < nb; ++k) d << g(lo + (k + 0.5) * (hi - lo) / nb) << " " << cnt[std::size_t(k)] << "\n";
      d << "\n\n";
      titles.push_back(str(p, "variant") + ": " + str(p, "comparison") + " (p = " + pval(num(p, "p")) + ")");
      reals.push_back(real);
    }
    if (!titles.empty()) {
      const auto [rows, cols] = grid(titles.size());
      std::ostringstream b;
      b << "set multiplot layout " << rows << "," << cols << " title 'Exact-null distribution of the mean gain over runs (red: real)'\n"
        << "set style fill solid 0.6 border -1\nset xlabel 'gain [nats]'\nset ylabel 'replicates'\nset format x '%.4f'\n"
           "set xtics rotate by -30 font ',8'\n";
      for (std::size_t k = 0; k < titles.size(); ++k)
        b << "set title " << q(titles[k]) << " font ',9'\nunset arrow\nset arrow from " << g(reals[k]) << ", graph 0 to "
          << g(reals[k]) << ", graph 1 nohead lw 2 lc rgb '#d62728' front\nplot 'exact_null.dat' index " << k
          << " using 1:2 with boxes lc rgb '#9ecae1' notitle\n";
      b << "unset multiplot\n";
      w.render("exact_null", d.str(), b.str(), 400 * cols, 300 * rows + 40);
      s.fig("exact_null", "Null distribution of each comparison's mean gain over runs, with the real mean gain.");
    }
    secs.push_back(s);
  }

  // ---- Configuration
  if (has_study) {
    Section s{"Configuration", {}};
    s.p("The resolved study (arcal run --config FILE reproduces it; every run directory also holds its config.json):");
    s.code(str(r["study"], "config_toml"));
    secs.push_back(s);
  }

  // ---- Render HTML and Markdown
  const std::string title = has_study ? "arcal report: " + str(r["study"], "name") : std::string("arcal audit report");
  std::ostringstream html, md;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(title) << "</title>\n<style>\n"
       << "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;"
          "color:#222;line-height:1.45}\nh1{border-bottom:2px solid #08306b}h2{margin-top:2em;border-bottom:1px solid #ccc}\n"
          "table{border-collapse:collapse;margin:0.8em 0;font-size:0.86em}td,th{border:1px solid #ccc;padding:3px 7px;"
          "text-align:left}th{background:#eef3f8}tr:nth-child(even) td{background:#fafafa}\n"
          "figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:0.9em;color:#555}\n"
          "pre{background:#f6f8fa;padding:0.8em;overflow-x:auto;font-size:0.85em}.verdict td:first-child{width:1.5em}\n"
       << "</style></head><body>\n<h1>" << html_escape(title) << "</h1>\n";
  md << "# " << title << "\n\n";
  for (auto& sec : secs) {
    html << "<h2>" << html_escape(sec.title) << "</h2>\n";
    md << "## " << sec.title << "\n\n";
    for (auto& bl : sec.blocks) {
      switch (bl.kind) {
        case Block::text:
          html << "<p>" << html_escape(bl.body) << "</p>\n";
          md << bl.body << "\n\n";
          break;
        case Block::pre:
          html << "<pre>" << html_escape(bl.body) << "</pre>\n";
          md << "```toml\n" << bl.body << "```\n\n";
          break;
        case Block::figure:
          html << "<figure><a href=\"figures/" << bl.body << ".png\"><img style=\"width:" << w.widths[bl.body]
               << "px\" src=\"figures/" << bl.body << ".svg\" alt=\""
               << html_escape(bl.caption) << "\"></a><figcaption>" << html_escape(bl.caption) << " (<a href=\"figures/" << bl.body
               << ".dat\">data</a>, <a href=\"figures/" << bl.body << ".gp\">gnuplot script</a>)</figcaption></figure>\n";
          md << "![" << bl.caption << "](figures/" << bl.body << ".svg)\n\n*" << bl.caption << "* (data: `figures/" << bl.body
             << ".dat`, script: `figures/" << bl.body << ".gp`)\n\n";
          break;
        case Block::table: {
          html << "<table" << (sec.title == "Summary" ? " class=\"verdict\"" : "") << "><tr>";
          for (auto& h : bl.t.header) html << "<th>" << html_escape(h) << "</th>";
          html << "</tr>\n";
          for (auto& row : bl.t.rows) {
            html << "<tr>";
            for (auto& c : row) html << "<td>" << html_escape(c) << "</td>";
            html << "</tr>\n";
          }
          html << "</table>\n";
          if (!bl.caption.empty()) html << "<p><em>" << html_escape(bl.caption) << "</em></p>\n";
          md << "|";
          for (auto& h : bl.t.header) md << " " << h << " |";
          md << "\n|";
          for (std::size_t i = 0; i < bl.t.header.size(); ++i) md << "---|";
          md << "\n";
          for (auto& row : bl.t.rows) {
            md << "|";
            for (auto& c : row) {
              std::string cell = c;
              std::replace(cell.begin(), cell.end(), '|', '/');
              md << " " << cell << " |";
            }
            md << "\n";
          }
          md << "\n";
          if (!bl.caption.empty()) md << "*" << bl.caption << "*\n\n";
          break;
        }
      }
    }
  }
  html << "<p style=\"color:#777;font-size:0.8em\">Written by arcal " << ARCAL_VERSION
       << " from results.json; tables as CSV in tables/, figures with their data and gnuplot scripts in figures/.</p>\n"
       << "</body></html>\n";
  out.html = out_dir + "/report.html";
  out.markdown = out_dir + "/report.md";
  if (!w.dry) {
    write_file_atomic(out.markdown, md.str());
    write_file_atomic(out.html, html.str());
  }
  out.figures = w.figures;
}

/// nlohmann's errors on results.json (type_error with the JSON pointer of the value) as InputError.
template <class F>
void with_named_errors(const std::string& path, F&& f) {
  try {
    f();
  } catch (const json::exception& e) {
    throw_input(kFn, path + ": a value has the wrong type or shape for an arcal audit result: " + e.what());
  }
}

/// The report directory is replaced as a whole, so it must not hold the input and must be a report
/// (or empty, or absent): anything else there would be lost.
void check_report_target(const std::string& dir, const std::string& out_dir) {
  if (path_within(dir, out_dir))
    throw_input("--out", out_dir + " would contain the input " + dir + "/results.json, but the report directory is "
                                   "replaced as a whole; choose a directory outside " + dir + " or below it (default " +
                                   dir + "/report)");
  std::error_code ec;
  if (!fs::exists(out_dir, ec)) return;
  if (!fs::is_directory(out_dir, ec)) throw_input("--out", out_dir + " exists and is not a directory");
  const bool report = fs::exists(out_dir + "/report.html", ec) || fs::exists(out_dir + "/report.md", ec);
  if (!report && !fs::is_empty(out_dir, ec))
    throw_input("--out", out_dir + " exists and is not an arcal report (no report.html); the report directory is "
                                   "replaced as a whole, so choose another --out or remove it yourself");
}

}  // namespace

namespace {

/// results.json text -> a checked audit result: size and nesting limits, JSON syntax, the schema,
/// and every value the report reads (built once without writing).
json parse_results(const std::string& text, const std::string& path) {
  if (text.size() > input_limits().max_text_bytes)
    throw_input(kFn, path + " is " + byte_size(text.size()) + ", more than the limit of " +
                         byte_size(input_limits().max_text_bytes));
  check_json_nesting(text, kFn, path);
  json r = json::parse(text, nullptr, false);
  if (r.is_discarded()) throw_input(kFn, path + " is not valid JSON");
  if (!r.is_object() || !r.contains("schema") || !r["schema"].is_string() ||
      r["schema"].get<std::string>().rfind("arcal.audit/", 0) != 0 || !r.contains("diagnostic") ||
      !r["diagnostic"].is_object())
    throw_input(kFn, path + " is not an arcal audit result (schema 'arcal.audit/1' with a diagnostic section)");
  with_named_errors(path, [&] {
    json copy = r;
    Writer w("", true);
    ReportOutput out;
    build_report(copy, path, "", w, out);
  });
  return r;
}

}  // namespace

void check_report_text(const std::string& text, const std::string& path) { parse_results(text, path); }

ReportOutput write_report(const std::string& dir, const std::string& out_dir) {
  const std::string path = dir + "/results.json";
  if (!fs::exists(path)) throw_input(kFn, path + " does not exist (run arcal audit --out DIR or arcal run first)");
  json r = parse_results(read_text_file(path, kFn, "results.json", input_limits().max_text_bytes), path);
  check_report_target(dir, out_dir);

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
    Writer w(tmp + "/figures", false);
    with_named_errors(path, [&] { build_report(r, path, tmp, w, out); });
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

}  // namespace arcal
