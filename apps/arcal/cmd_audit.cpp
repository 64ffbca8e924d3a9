// arcal audit: the routing-conditional audit over one or many runs' traces. Loads each trace,
// derives confidence, correctness, predictive entropy and the requested statistics, then calls the
// library (audit/audit.hpp), which validates the whole input before computing and writes
// DIR/results.json (schema "arcal.audit/1") and CSV tables atomically.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "audit/audit.hpp"
#include "audit/routing_stats.hpp"
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

/// Runs of one cell differ only by seed: model/residual/dataset/split from the trace's meta,
/// or the file path when the meta does not say.
std::string cell_of(const arcal::Trace& t, const std::string& path) {
  const auto meta = nlohmann::json::parse(t.meta_json.empty() ? "{}" : t.meta_json, nullptr, false);
  if (meta.is_discarded() || !meta.is_object() || !meta.contains("model")) return path;
  std::string cell;
  for (const char* key : {"model", "residual", "block_size", "dataset", "split"})
    if (meta.contains(key))
      cell += (cell.empty() ? "" : "/") + (meta[key].is_string() ? meta[key].get<std::string>() : meta[key].dump());
  return cell;
}

arcal::AuditRunInput load_run(const std::string& path, const std::vector<std::string>& stats) {
  const arcal::Trace t = arcal::load_trace(path);
  const auto probs = arcal::trace_probabilities(t);
  arcal::AuditRunInput in;
  in.run = path;
  in.cell = cell_of(t, path);
  in.classes = t.classes;
  in.labels = t.labels;
  in.confidence.resize(t.n);
  in.correct.resize(t.n);
  in.predictive_entropy.resize(t.n);
  for (std::size_t i = 0; i < t.n; ++i) {
    const double* p = &probs[i * t.classes];
    std::size_t arg = 0;
    double h = 0.0;
    for (std::size_t k = 0; k < t.classes; ++k) {
      if (p[k] > p[arg]) arg = k;  // ties: lowest index
      if (p[k] > 0) h -= p[k] * std::log(p[k]);
    }
    in.confidence[i] = p[arg];
    in.correct[i] = static_cast<std::int64_t>(arg) == t.labels[i] ? 1.0 : 0.0;
    in.predictive_entropy[i] = h;
  }
  for (const auto& name : stats) {
    in.statistic_names.push_back(name);
    in.statistics.push_back(arcal::statistic_column(t, name));
  }
  return in;
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
    const auto res = arcal::run_audit(runs, opt);  // validates everything before computing
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
    }
    return 0;
  };
}

ARCAL_COMMAND("audit", "Routing-conditional calibration audit over one or many traces", setup_audit);

}  // namespace
