// arcal audit: the routing-conditional audit over one or many runs' traces. Loads each trace,
// derives confidence, correctness, predictive entropy and the requested statistics, then calls the
// library (audit/torch/audit_pipeline.hpp, also behind the Python module's arcal.audit), which
// validates the whole input before computing, and writes DIR/results.json (schema "arcal.audit/2")
// and CSV tables atomically.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "audit/audit.hpp"
#include "audit/run_input.hpp"
#include "audit/torch/audit_pipeline.hpp"
#include "audit/torch/probes.hpp"
#include "audit/torch/sensitivity_audit.hpp"
#include "command.hpp"
#include "core/check.hpp"
#include "core/paths.hpp"
#include "core/progress.hpp"
#include "flag_checks.hpp"
#include "io/trace.hpp"

namespace {

struct AuditConfig {
  std::vector<std::string> traces;
  std::string out;
  std::string stats = "re,rdv";
  int permutations = 10000;
  std::uint64_t seed = 0;
  std::size_t bins = 15;
  bool equal_mass = false;
  double alpha = 0.05;
  bool no_condcal = false;
  bool probes = true;
  int probe_restarts = 1;
  int probe_repeats = 5;
  bool sensitivity = false;
  std::string sensitivity_effects = "0.002,0.005,0.010,0.020";
  int sensitivity_draws = 20;
  double sensitivity_threshold = 0.5;
  double sensitivity_threshold_effect = 0.010;
  double correction_ridge = -1.0;
  bool exact_null = false;
  std::size_t null_group_size = 5;
  bool null_model_based = true;
  int null_replicates = 200;
  std::string null_variants = "confidence,full_logit";
  int refit_restarts = 1;
  int refit_patience = 3;
  bool refit_cold = false;
  int threads = 0;
  bool json = false;
  bool force = false;
};

/// DIR/results.json and the CSV tables beside it: refused when one of them is an input trace, and
/// when results.json exists without --force (an earlier audit's results would be replaced).
void check_audit_out(const AuditConfig& cfg) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(cfg.out, ec) && !fs::is_directory(cfg.out, ec))
    arcal::throw_input("--out", cfg.out + " exists and is not a directory (the audit writes DIR/results.json and CSV tables)");
  for (const char* f : {"results.json", "diagnostic.csv", "condcal.csv", "probes.csv", "probe_comparisons.csv",
                        "sensitivity.csv", "exact_null.csv"})
    arcal::check_output_not_input("--out", cfg.out + "/" + f, cfg.traces);
  if (fs::exists(cfg.out + "/results.json", ec) && !cfg.force)
    arcal::throw_input("--out", cfg.out + "/results.json already exists (an earlier audit); pass --force to replace its "
                                "results (atomically, file by file) or choose another --out");
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

arcal::AuditRunInput load_run(const std::string& path, const std::vector<std::string>& stats) {
  return arcal::make_audit_run_input(arcal::load_trace(path), path, stats);
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
    std::snprintf(buf, sizeof buf, "  %-40s %+.5f [%+.5f, %+.5f]  p_holm %.3g  own interval above 0 in %zu/%zu runs, below in %zu: %s\n",
                  t.comparison.c_str(), -t.mean_delta, -t.ci.high, -t.ci.low, t.p_holm, t.runs_better, t.deltas.size(),
                  t.runs_worse, t.verdict.c_str());
    out += buf;
  }
  return out;
}

/// Recovery per probe at every effect, then the verdicts at the threshold effect.
std::string sensitivity_summary(const arcal::SensitivityResult& s) {
  std::string out = "sensitivity (" + std::to_string(s.runs.size()) + " runs x " + std::to_string(s.draws) + " draws, " +
                    std::to_string(s.seconds).substr(0, 6) + " s): recovery R [95 % CI] (gain in nats where the effect is 0)\n";
  char buf[512];
  for (const auto& e : s.by_effect)
    for (const auto& p : e.probes) {
      if (p.has_recovery)
        std::snprintf(buf, sizeof buf, "  %.3f nats %-22s R %+.3f [%+.3f, %+.3f]\n", e.effect_nats, p.probe.c_str(), p.recovery,
                      p.recovery_ci.low, p.recovery_ci.high);
      else
        std::snprintf(buf, sizeof buf, "  %.3f nats %-22s gain %+.5f [%+.5f, %+.5f]\n", e.effect_nats, p.probe.c_str(), p.gain,
                      p.gain_ci.low, p.gain_ci.high);
      out += buf;
    }
  for (const auto& v : s.verdicts) out += "  verdict " + v.probe + ": " + v.verdict + "\n";
  return out;
}

/// Pooled exact-null p per variant and comparison.
std::string exact_null_summary(const arcal::ExactNullResult& x) {
  std::string out = "exact null (" + std::to_string(x.replicates) + " replicates, " + std::to_string(x.seconds).substr(0, 6) +
                    " s): mean real gain over runs vs the conditional permutation null (the decision), Monte-Carlo p\n";
  char buf[512];
  for (const auto& p : x.pooled) {
    std::snprintf(buf, sizeof buf, "  %-11s %-40s real %+.5f  null mean %+.5f q95 %+.5f  p %.3f\n", p.variant.c_str(),
                  p.comparison.c_str(), p.real_mean_gain, p.null_mean, p.null_q95, p.p);
    out += buf;
  }
  for (const auto& r : x.runs) {
    std::snprintf(buf, sizeof buf, "  matching %s (%s): %zu groups, mean within-group distance %.3g (random pairs %.3g)\n",
                  r.run.c_str(), r.variant.c_str(), r.matching.groups, r.matching.mean_distance,
                  r.matching.random_pair_distance);
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
      std::snprintf(buf, sizeof buf, "    reference fit %s (%s): Hosmer-Lemeshow %.1f on %.0f df, p %.3g\n", r.run.c_str(),
                    r.variant.c_str(), r.reference_fit.statistic, r.reference_fit.df, r.reference_fit.p);
      out += buf;
    }
  }
  return out;
}

arcal::cli::RunFn setup_audit(CLI::App& app) {
  auto cfg = std::make_shared<AuditConfig>();
  app.add_option("traces", cfg->traces, "Trace files (.npz), one per run")->required()->check(CLI::ExistingFile);
  app.add_option("--out", cfg->out, "Output directory (results.json, diagnostic.csv, condcal.csv)")->required();
  app.add_option("--stat", cfg->stats, "Statistics to audit: re, rdv or feature names, comma-separated");
  using arcal::cli::in_range;
  namespace R = arcal::ranges;
  app.add_option("--permutations", cfg->permutations, "Within-bin permutations R")->check(in_range(R::permutations));
  app.add_option("--seed", cfg->seed, "Seed of permutations, splits and shuffles")->check(arcal::cli::seed_check());
  app.add_flag("--force", cfg->force, "Replace the results of an earlier audit in --out");
  app.add_option("--bins", cfg->bins, "Confidence bins (15; sensitivity: 10 with --equal-mass)")
      ->check(in_range(R::bins));
  app.add_flag("--equal-mass", cfg->equal_mass, "Equal-mass confidence bins (sensitivity analysis)");
  app.add_option("--alpha", cfg->alpha, "Test level")->check(in_range(arcal::RealRange{1e-9, 0.999, false}));
  app.add_flag("--no-condcal", cfg->no_condcal, "Skip AR-CondCal (diagnostic only)");
  app.add_flag("--probes,!--no-probes", cfg->probes, "MLP correctness probes and their controls (default on)");
  app.add_option("--probe-restarts", cfg->probe_restarts, "Seeded restarts averaged per MLP probe and split")
      ->check(in_range(R::probe_restarts));
  app.add_option("--probe-repeats", cfg->probe_repeats,
                 "Repeated 2-fold cross-fits per run (the per-run test's variance includes the refits')")
      ->check(in_range(R::probe_repeats));
  app.add_flag("--sensitivity", cfg->sensitivity, "Sensitivity (injection) audit, method.md §6.5 (refits every probe)");
  app.add_option("--sensitivity-effects", cfg->sensitivity_effects, "Injected oracle gains in nats, comma-separated");
  app.add_option("--sensitivity-draws", cfg->sensitivity_draws, "Synthetic label draws per run and effect")
      ->check(in_range(R::sensitivity_draws));
  app.add_option("--sensitivity-threshold", cfg->sensitivity_threshold, "Recovery R needed for the verdict \"absent\"")
      ->check(in_range(R::sensitivity_threshold));
  app.add_option("--sensitivity-threshold-effect", cfg->sensitivity_threshold_effect,
                 "Effect (nats, one of --sensitivity-effects) at which the threshold applies");
  app.add_option("--correction-ridge", cfg->correction_ridge,
                 "L2 penalty of the correction probe's cubic g(z); negative: chosen per fit by 5-fold inner CV")
      ->check(in_range(R::correction_ridge));
  app.add_flag("--exact-null", cfg->exact_null, "Exact-null audit, method.md §6.6 (refits every probe)");
  app.add_option("--null-group-size", cfg->null_group_size,
                 "Matched-group size of the conditional permutation null (examples with nearly identical outputs)")
      ->check(in_range(R::null_group_size));
  app.add_flag("--null-model-based,!--no-null-model-based", cfg->null_model_based,
               "Also run the model-based null (labels from a fitted reference; not the decision)");
  app.add_option("--null-replicates", cfg->null_replicates, "Null label replicates per run and variant")
      ->check(in_range(R::null_replicates));
  app.add_option("--null-variants", cfg->null_variants, "Exact-null references: confidence, full_logit (comma-separated)");
  app.add_option("--refit-restarts", cfg->refit_restarts, "Restarts per MLP refit (sensitivity, exact null)")
      ->check(in_range(R::probe_restarts));
  app.add_option("--refit-patience", cfg->refit_patience, "Early-stopping patience of the refits")
      ->check(in_range(R::refit_patience));
  app.add_flag("--refit-cold", cfg->refit_cold, "Refits start from a seeded random initialisation instead of the soft-reference fit");
  app.add_option("--threads", cfg->threads,
                 "Worker threads for the MLP fits, one fit per thread (0 = all cores); results do not depend on it")
      ->check(in_range(R::audit_threads))
      ->capture_default_str();
  app.add_flag("--json", cfg->json, "Print results.json to stdout as well");
  return [cfg]() {
    check_audit_out(*cfg);
    const auto stats = split_names(cfg->stats);
    if (stats.empty()) arcal::throw_input("arcal audit", "--stat names no statistic, so the test family would be empty");
    arcal::FullAuditOptions opt;
    opt.permutations = cfg->permutations;
    opt.seed = cfg->seed;
    opt.bins = cfg->bins;
    opt.equal_mass = cfg->equal_mass;
    opt.alpha = cfg->alpha;
    opt.condcal = !cfg->no_condcal;
    opt.probes = cfg->probes;
    opt.probe_restarts = cfg->probe_restarts;
    opt.probe_repeats = cfg->probe_repeats;
    opt.sensitivity = cfg->sensitivity;
    opt.sensitivity_effects.clear();
    for (const auto& e : split_names(cfg->sensitivity_effects)) {
      std::size_t used = 0;
      double v = -1;
      try {
        v = std::stod(e, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != e.size() || !(v >= 0) || !std::isfinite(v))
        arcal::throw_input("arcal audit", "--sensitivity-effects entry '" + e + "' is not a finite number >= 0");
      opt.sensitivity_effects.push_back(v);
    }
    opt.sensitivity_draws = cfg->sensitivity_draws;
    opt.sensitivity_threshold = cfg->sensitivity_threshold;
    opt.sensitivity_threshold_effect = cfg->sensitivity_threshold_effect;
    opt.correction_ridge = cfg->correction_ridge;
    opt.exact_null = cfg->exact_null;
    opt.null_replicates = cfg->null_replicates;
    opt.null_variants = split_names(cfg->null_variants);
    opt.null_group_size = cfg->null_group_size;
    opt.null_model_based = cfg->null_model_based;
    opt.refit_restarts = cfg->refit_restarts;
    opt.refit_patience = cfg->refit_patience;
    opt.refit_cold = cfg->refit_cold;
    opt.threads = cfg->threads;
    opt.progress = arcal::cli::progress_enabled();
    std::vector<arcal::AuditRunInput> runs;
    for (const auto& path : cfg->traces) {
      if (opt.progress) std::fprintf(stderr, "loading %s\n", path.c_str());
      runs.push_back(load_run(path, stats));
    }
    const auto res = arcal::run_full_audit(runs, opt);  // validates everything before computing
    arcal::write_audit_results(res, cfg->out);
    if (cfg->json) {
      std::printf("%s\n", arcal::audit_results_json(res).dump(2).c_str());
    } else {
      std::size_t raw = 0, holm = 0;
      for (const auto& t : res.diagnostic.tests) {
        raw += t.result.p <= cfg->alpha;
        holm += t.p_holm <= cfg->alpha;
      }
      std::printf("%zu tests: %zu reject at alpha = %g (raw), %zu after Holm; wrote %s/results.json\n",
                  res.diagnostic.family_size, raw, cfg->alpha, holm, cfg->out.c_str());
      if (res.has_probes) std::printf("%s", probe_summary(res.probes).c_str());
      if (res.has_sensitivity) std::printf("%s", sensitivity_summary(res.sensitivity).c_str());
      if (res.has_exact_null) std::printf("%s", exact_null_summary(res.exact_null).c_str());
    }
    return 0;
  };
}

ARCAL_COMMAND("audit", "Routing-conditional calibration audit over one or many traces", setup_audit);

}  // namespace
