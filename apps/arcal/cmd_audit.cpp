// arcal audit: the routing-conditional audit over one or many runs' traces. Loads each trace,
// derives confidence, correctness, predictive entropy and the requested statistics, then calls the
// library (audit/audit_pipeline.hpp, also behind the Python module's arcal.audit), which
// validates the whole input before computing, and writes DIR/results.json (schema "arcal.audit/3")
// and CSV tables atomically.
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <memory>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "audit/audit.hpp"
#include "results/audit_files.hpp"
#include "audit/routing_stats.hpp"
#include "audit/run_input.hpp"
#include "audit/audit_pipeline.hpp"
#include "audit/probes.hpp"
#include "audit/exact_null.hpp"
#include "audit/sensitivity_audit.hpp"
#include "command.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/ownership.hpp"
#include "core/paths.hpp"
#include "core/progress.hpp"
#include "core/run_lock.hpp"
#include "flag_checks.hpp"
#include "option_binding.hpp"
#include "results/verdict.hpp"
#include "io/trace.hpp"

namespace {

struct AuditConfig {
  std::vector<std::string> traces;
  std::string out;
  arcal::FullAuditOptions options;  ///< every audit option, bound from audit_option_table()
  bool json = false;
  bool force = false;
};

/// The files of one audit's result set (write_audit_results).
const std::vector<std::string> kAuditFiles{"results.json",          "diagnostic.csv",  "condcal.csv",   "probes.csv",
                                           "probe_comparisons.csv", "sensitivity.csv", "exact_null.csv"};

/// DIR/results.json and the CSV tables beside it: refused when one of them is an input trace, when
/// DIR is a directory arcal did not make (no marker, and not an audit of an earlier arcal) without
/// --force, and when results.json exists without --force (an earlier audit's results would be
/// replaced). Paths must be UTF-8 (results.json records them): checked before any work.
void check_audit_out(const AuditConfig& cfg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  arcal::check_utf8_path("--out", cfg.out);
  for (const auto& t : cfg.traces) arcal::check_utf8_path("traces", t);
  if (fs::exists(cfg.out, ec) && !fs::is_directory(cfg.out, ec))
    arcal::throw_input("--out",
                       cfg.out + " exists and is not a directory (the audit writes DIR/results.json and CSV tables)");
  for (const auto& f : kAuditFiles) arcal::check_output_not_input("--out", cfg.out + "/" + f, cfg.traces);
  arcal::check_output_dir("--out", cfg.out, "arcal audit", cfg.force, "--force");
  if (fs::exists(cfg.out + "/results.json", ec) && !cfg.force)
    arcal::throw_input("--out", cfg.out +
                                    "/results.json already exists (an earlier audit); pass --force to replace its "
                                    "results (as a whole, once the new set is complete) or choose another --out");
}

/// The output directory of one audit, held for the whole audit: DIR/.lock (a second audit into DIR is
/// refused while this one runs, instead of the later finisher silently replacing the first's results)
/// and the marker. The result set is written into DIR/.tmp-PID/ and moved into DIR only once it is
/// complete (a full disk used to leave a new diagnostic.csv beside an old results.json); files of an
/// earlier set that the new one does not have are removed, so DIR always holds one audit's results.
class AuditOutput {
 public:
  explicit AuditOutput(const AuditConfig& cfg) : dir_(cfg.out) {
    namespace fs = std::filesystem;
    std::error_code ec;
    created_ = !fs::exists(dir_, ec);
    fs::create_directories(dir_, ec);
    if (ec) arcal::throw_input("--out", "cannot create " + dir_ + ": " + ec.message());
    try {
      lock_ = std::make_unique<arcal::DirLock>(dir_, "arcal audit");
      check_audit_out(cfg);  // again, under the lock: an audit that finished meanwhile wrote results.json
      ours_ = created_ || arcal::has_output_marker(dir_);
      arcal::mark_output_dir(dir_, "arcal audit");
    } catch (...) {
      lock_.reset();
      if (created_) fs::remove_all(dir_, ec);
      throw;
    }
    // Temporaries of dead writers (a kill -9 mid-write): only DIR/.tmp-PID-START directories whose
    // marker names that same process (core/ownership.hpp); a user's DIR/.tmp-notes stays.
    for (const auto& e : fs::directory_iterator(dir_, ec))
      if (arcal::stale_owned_dir(e.path().string(), ".tmp-")) fs::remove_all(e.path(), ec);
  }
  ~AuditOutput() {
    std::error_code ec;
    if (!tmp_.empty()) std::filesystem::remove_all(tmp_, ec);
    if (!committed_ && created_) {  // refused or failed before writing: leave no directory behind
      lock_.reset();
      std::filesystem::remove_all(dir_, ec);
    }
  }

  void write(const arcal::AuditResults& res) {
    namespace fs = std::filesystem;
    tmp_ = dir_ + "/.tmp-" + arcal::process_tag();
    std::error_code ec;
    arcal::make_owned_dir(tmp_, "arcal audit");
    arcal::write_audit_results(res, tmp_);
    for (const auto& f : kAuditFiles) {
      const std::string from = tmp_ + "/" + f, to = dir_ + "/" + f;
      if (fs::exists(from, ec)) {
        if (std::rename(from.c_str(), to.c_str()) != 0) arcal::throw_write_error("arcal audit", to, errno);
      } else if (ours_) {
        fs::remove(to, ec);  // the earlier set's, not this one's (only in a directory arcal made)
      }
    }
    committed_ = true;
  }

 private:
  std::string dir_, tmp_;
  bool created_ = false, committed_ = false;
  bool ours_ = false;  ///< DIR was arcal's before this audit (made now, or holding the marker), not a --force'd one
  std::unique_ptr<arcal::DirLock> lock_;
};

/// The statistics of an audit whose --stat was not given: those that apply to the first trace
/// (default_statistics); a trace of logits and labels only has none, which is refused with the way to
/// its calibration.
std::vector<std::string> statistics_for(const arcal::Trace& first, const std::string& path) {
  auto stats = arcal::default_statistics(first);
  if (stats.empty())
    arcal::throw_input(
        "arcal audit",
        path +
            " has logits and labels only (no routing, no features), so there is no "
            "signal to audit beyond the outputs; its calibration and reliability diagram: arcal metrics " +
            path + " --figures DIR (and arcal calibrate); give per-example signals as features (--stat NAME)");
  return stats;
}

/// One line per comparison: the log-loss gain (control − probe, positive = the probe is better) pooled
/// over runs (random effects) with its interval and Holm p, the count of runs whose own interval lies
/// above 0 (a count, not a test), and the verdict.
std::string probe_summary(const arcal::ProbeFamily& f) {
  std::string out = "probes (" + std::to_string(f.runs.size()) + " runs, " + std::to_string(f.seconds).substr(0, 5) +
                    " s): log-loss gain over each control, pooled over runs [95 % CI], Holm p\n";
  char buf[512];
  for (const auto& t : f.tests) {
    if (t.metric != "log_loss") continue;
    std::snprintf(buf, sizeof buf,
                  "  %-40s %+.5f [%+.5f, %+.5f]  p_holm %.3g  own interval above 0 in %zu/%zu runs, below in %zu: %s\n",
                  t.comparison.c_str(), -t.mean_delta, -t.ci.high, -t.ci.low, t.p_holm, t.runs_better, t.deltas.size(),
                  t.runs_worse, t.verdict.c_str());
    out += buf;
  }
  return out;
}

/// Recovery per probe at every effect, then the verdicts at the threshold effect.
std::string sensitivity_summary(const arcal::SensitivityResult& s) {
  std::string out = "sensitivity (" + std::to_string(s.runs.size()) + " runs x " + std::to_string(s.draws) +
                    " draws, " + std::to_string(s.seconds).substr(0, 6) +
                    " s): recovery R [95 % CI] (gain in nats where the effect is 0)\n";
  char buf[512];
  for (const auto& e : s.by_effect)
    for (const auto& p : e.probes) {
      if (p.has_recovery)
        std::snprintf(buf, sizeof buf, "  %.3f nats %-22s R %+.3f [%+.3f, %+.3f]\n", e.effect_nats, p.probe.c_str(),
                      p.recovery, p.recovery_ci.low, p.recovery_ci.high);
      else
        std::snprintf(buf, sizeof buf, "  %.3f nats %-22s gain %+.5f [%+.5f, %+.5f]\n", e.effect_nats, p.probe.c_str(),
                      p.gain, p.gain_ci.low, p.gain_ci.high);
      out += buf;
    }
  for (const auto& v : s.verdicts) out += "  verdict " + v.probe + ": " + v.verdict + "\n";
  if (const auto scope = arcal::refit_scope_text(s.refit); !scope.empty()) out += "  " + scope + "\n";
  return out;
}

/// Pooled exact-null p per variant and comparison.
std::string exact_null_summary(const arcal::ExactNullResult& x) {
  std::string out =
      "exact null (at most " + std::to_string(x.replicates) + " replicates" +
      (x.stop_after > 0 ? ", sequential: stops at " + std::to_string(x.stop_after) + " null gains >= real" : "") +
      ", " + std::to_string(x.seconds).substr(0, 6) +
      " s): mean real gain over runs vs the conditional permutation null (the decision), Monte-Carlo p\n";
  char buf[512];
  for (const auto& p : x.pooled) {
    std::snprintf(buf, sizeof buf, "  %-11s %-40s real %+.5f  null mean %+.5f q95 %+.5f  p %.3f (%zu replicates)\n",
                  p.variant.c_str(), p.comparison.c_str(), p.real_mean_gain, p.null_mean, p.null_q95, p.p,
                  p.replicates);
    out += buf;
  }
  if (const auto scope = arcal::refit_scope_text(x.refit); !scope.empty()) out += "  " + scope + "\n";
  for (const auto& r : x.runs) {
    std::snprintf(
        buf, sizeof buf, "  matching %s (%s): %zu groups, mean within-group distance %.3g (random pairs %.3g)\n",
        r.run.c_str(), r.variant.c_str(), r.matching.groups, r.matching.mean_distance, r.matching.random_pair_distance);
    out += buf;
  }
  if (x.has_model_based) {
    out += "  model-based null (labels from a fitted reference; valid only if it is right):\n";
    for (const auto& p : x.model_pooled) {
      std::snprintf(buf, sizeof buf, "    %-11s %-40s real %+.5f  p %.3f\n", p.variant.c_str(), p.comparison.c_str(),
                    p.real_mean_gain, p.p);
      out += buf;
    }
    for (const auto& r : x.model_runs) {
      std::snprintf(buf, sizeof buf, "    reference fit %s (%s): Hosmer-Lemeshow %.1f on %.0f df, p %.3g\n",
                    r.run.c_str(), r.variant.c_str(), r.reference_fit.statistic, r.reference_fit.df, r.reference_fit.p);
      out += buf;
    }
  }
  return out;
}

/// The command's own options (the audit's are audit/audit_options.hpp's table; docs/interface.md
/// "Command options", generated).
const arcal::OptionTable<AuditConfig>& audit_cli_options() {
  using C = AuditConfig;
  using O = arcal::Option<C>;
  static const arcal::OptionTable<C> table = {
      O("traces", "traces", "Trace files (.npz), one per run", &C::traces).given().existing(O::Path::existing_file),
      O("out", "--out", "Output directory (results.json, diagnostic.csv, condcal.csv)", &C::out).given(),
      {"force", "--force", "Replace the results of an earlier audit in --out", &C::force},
      {"json", "--json", "Print results.json to stdout instead of the summary", &C::json},
  };
  return table;
}

arcal::cli::RunFn setup_audit(CLI::App& app) {
  auto cfg = std::make_shared<AuditConfig>();
  arcal::cli::bind_options(app, audit_cli_options(), *cfg);
  arcal::cli::bind_options(app, arcal::audit_option_table(), cfg->options,
                           "the audit family (\"Audit options\" above)");
  CLI::Option* stat_opt = app.get_option("--stat");
  stat_opt->description(stat_opt->get_description() +
                        " (default: those that apply to the first trace: re, rdv for depth routing; re for unordered "
                        "MoE routing; its features when it has no routing)");
  return [cfg, stat_opt]() {
    check_audit_out(*cfg);
    AuditOutput output(*cfg);
    arcal::FullAuditOptions opt = cfg->options;
    arcal::validate_audit_options(opt, "arcal audit");
    opt.progress = arcal::cli::progress_enabled_on(STDERR_FILENO);  // the bars and log lines go to stderr
    std::vector<arcal::AuditRunInput> runs;
    for (const auto& path : cfg->traces) {
      if (opt.progress) std::fprintf(stderr, "loading %s\n", path.c_str());
      const arcal::Trace t = arcal::load_trace(path);
      // Without --stat: the statistics that apply to the first trace (re, rdv for depth routing; re
      // for unordered MoE routing; the features of a trace without routing).
      if (runs.empty() && stat_opt->count() == 0) opt.stats = statistics_for(t, path);
      runs.push_back(arcal::make_audit_run_input(t, path, opt.stats));
    }
    const auto res = arcal::run_full_audit(std::move(runs), opt);  // validates everything before computing
    output.write(res);
    if (cfg->json) {
      std::printf("%s\n", arcal::audit_results_json(res).dump(2).c_str());
    } else {
      std::size_t raw = 0, holm = 0;
      for (const auto& t : res.diagnostic.tests) {
        raw += t.result.p <= opt.alpha;
        holm += t.p_holm <= opt.alpha;
      }
      std::printf("%zu tests: %zu reject at alpha = %g (raw), %zu after Holm; wrote %s/results.json\n",
                  res.diagnostic.family_size, raw, opt.alpha, holm, cfg->out.c_str());
      if (res.has_probes) std::printf("%s", probe_summary(res.probes).c_str());
      if (res.has_sensitivity) std::printf("%s", sensitivity_summary(res.sensitivity).c_str());
      if (res.has_exact_null) std::printf("%s", exact_null_summary(res.exact_null).c_str());
      std::printf("verdict: %s\n", res.verdict.summary.c_str());
    }
    return 0;
  };
}

ARCAL_COMMAND("audit", "Routing-conditional calibration audit over one or many traces", setup_audit);

}  // namespace
