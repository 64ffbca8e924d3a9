// arcal audit: the routing-conditional audit over one or many runs' traces. Loads each trace,
// derives confidence, correctness, predictive entropy and the requested statistics, then calls the
// library (audit/audit.hpp), which validates the whole input before computing and writes
// DIR/results.json (schema "arcal.audit/1") and CSV tables atomically.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "audit/audit.hpp"
#include "audit/run_input.hpp"
#include "audit/torch/probes.hpp"
#include <torch/torch.h>
#include "command.hpp"
#include "core/check.hpp"
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
  int probe_restarts = 5;
  bool json = false;
};

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

/// One line per comparison: the log-loss gain (control − probe, positive = the probe is better) as
/// the mean over runs with its bootstrap interval, runs whose own interval excludes 0, and the verdict.
std::string probe_summary(const arcal::ProbeFamily& f) {
  std::string out = "probes (" + std::to_string(f.runs.size()) + " runs, " + std::to_string(f.seconds).substr(0, 5) +
                    " s): log-loss gain over each control, mean over runs [95 % CI], Holm p\n";
  char buf[512];
  for (const auto& t : f.tests) {
    if (t.metric != "log_loss") continue;
    std::snprintf(buf, sizeof buf, "  %-40s %+.5f [%+.5f, %+.5f]  p_holm %.3g  better in %zu/%zu runs, worse in %zu: %s\n",
                  t.comparison.c_str(), -t.mean_delta, -t.ci.high, -t.ci.low, t.p_holm, t.runs_better, t.deltas.size(),
                  t.runs_worse, t.verdict.c_str());
    out += buf;
  }
  return out;
}

arcal::cli::RunFn setup_audit(CLI::App& app) {
  auto cfg = std::make_shared<AuditConfig>();
  app.add_option("traces", cfg->traces, "Trace files (.npz), one per run")->required()->check(CLI::ExistingFile);
  app.add_option("--out", cfg->out, "Output directory (results.json, diagnostic.csv, condcal.csv)")->required();
  app.add_option("--stat", cfg->stats, "Statistics to audit: re, rdv or feature names, comma-separated");
  app.add_option("--permutations", cfg->permutations, "Within-bin permutations R")->check(CLI::Range(1, 100000000));
  app.add_option("--seed", cfg->seed, "Seed of permutations, splits and shuffles");
  app.add_option("--bins", cfg->bins, "Confidence bins (15; sensitivity: 10 with --equal-mass)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000}));
  app.add_flag("--equal-mass", cfg->equal_mass, "Equal-mass confidence bins (sensitivity analysis)");
  app.add_option("--alpha", cfg->alpha, "Test level")->check(CLI::Range(1e-9, 0.999));
  app.add_flag("--no-condcal", cfg->no_condcal, "Skip AR-CondCal (diagnostic only)");
  app.add_flag("--probes,!--no-probes", cfg->probes, "MLP correctness probes and their controls (default on)");
  app.add_option("--probe-restarts", cfg->probe_restarts, "Seeded restarts averaged per MLP probe")
      ->check(CLI::Range(1, 100));
  app.add_flag("--json", cfg->json, "Print results.json to stdout as well");
  return [cfg]() {
    const auto stats = split_names(cfg->stats);
    if (stats.empty()) arcal::throw_input("arcal audit", "--stat names no statistic, so the test family would be empty");
    arcal::AuditOptions opt;
    opt.diagnostic.permutations = cfg->permutations;
    opt.diagnostic.seed = cfg->seed;
    opt.diagnostic.bins = cfg->bins;
    opt.diagnostic.scheme = cfg->equal_mass ? arcal::BinScheme::equal_mass : arcal::BinScheme::equal_width;
    opt.diagnostic.alpha = cfg->alpha;
    opt.condcal.seed = cfg->seed;
    opt.run_condcal = !cfg->no_condcal;
    const bool progress = arcal::cli::progress_enabled();
    std::vector<arcal::AuditRunInput> runs;
    for (const auto& path : cfg->traces) {
      if (progress) std::fprintf(stderr, "loading %s\n", path.c_str());
      runs.push_back(load_run(path, stats));
    }
    if (progress)
      std::fprintf(stderr, "auditing %zu runs x %zu statistics (R = %d)\n", runs.size(), stats.size(), cfg->permutations);
    arcal::ProbeAuditOptions popt;
    popt.seed = cfg->seed;
    popt.alpha = cfg->alpha;
    popt.mlp.restarts = cfg->probe_restarts;
    if (cfg->probes) arcal::validate_probe_inputs(runs, popt);
    auto res = arcal::run_audit(runs, opt);  // validates everything before computing
    if (cfg->probes) {
      // Small MLPs gain nothing from intra-op threads; one thread keeps the audit's cost predictable.
      torch::set_num_threads(1);
      if (progress) std::fprintf(stderr, "probes: %zu runs x 7 MLPs x 2 folds x %d restarts\n", runs.size(), cfg->probe_restarts);
      res.probes = arcal::run_probe_family(runs, popt);
      res.has_probes = true;
    }
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
    }
    return 0;
  };
}

ARCAL_COMMAND("audit", "Routing-conditional calibration audit over one or many traces", setup_audit);

}  // namespace
