// `arcal metrics F.npz`: calibration metrics of a trace's predictions with bootstrap intervals
// (method.md §4); a table by default, one JSON object with --json (keys in docs/interface.md);
// --figures DIR draws the reliability diagram (counts, consistency band) of any classifier's trace.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "calib/metrics.hpp"
#include "calib/trace_metrics.hpp"
#include "command.hpp"
#include "option_binding.hpp"
#include "core/check.hpp"
#include "core/paths.hpp"
#include "io/trace.hpp"
#include "report/plots.hpp"

namespace {

struct MetricsConfig {
  std::string input;
  int bins = 15;
  int bootstrap = 1000;
  std::uint64_t seed = 0;
  bool json = false;
  std::string figures;  ///< --figures DIR ("" = none)
  bool force = false;
};

/// DIR/reliability.{svg,png,dat,gp}: the top-label reliability diagram with the bins' counts and the
/// consistency band of a calibrated model (Binomial(n, c)/n, calib/binning.hpp), as `arcal report`
/// draws it for every run. DIR is arcal's only if arcal made it (the output-directory rule, checked by
/// run_metrics before any work).
std::vector<std::string> draw_reliability(const arcal::CalibrationReport& r, const MetricsConfig& cfg) {
  std::error_code ec;
  std::filesystem::create_directories(cfg.figures, ec);
  if (ec) arcal::throw_input("--figures", "cannot create " + cfg.figures + ": " + ec.message());
  arcal::mark_output_dir(cfg.figures, "arcal metrics");
  arcal::report::Figures figs(cfg.figures);
  const arcal::report::RelSeries s = arcal::report::reliability_series("accuracy", r.reliability);
  const std::string title =
      fmt::format("{}: ECE {:.4f}, n = {}", std::filesystem::path(cfg.input).filename().string(), r.ece.value, r.n);
  arcal::report::reliability_figure(figs, "reliability", title, {arcal::report::RelPanel{"top label", {s}}}, r.bins);
  return figs.paths;
}

int run_metrics(const MetricsConfig& cfg) {
  const arcal::Trace trace = arcal::load_trace(cfg.input);
  arcal::ReportOptions opt;
  opt.bins = cfg.bins;
  opt.draws = cfg.bootstrap;
  opt.smooth_diagram = cfg.json;  // for the report (arcal report of the JSON): relplot's smooth diagram
  opt.seed = cfg.seed;
  opt.cluster = trace.cluster;  // a token trace: the bootstrap resamples whole sequences
  if (!cfg.figures.empty()) arcal::check_output_dir("--figures", cfg.figures, "arcal metrics", cfg.force, "--force");
  const auto r = arcal::trace_calibration_report(trace, opt);
  const std::vector<std::string> drawn = cfg.figures.empty() ? std::vector<std::string>{} : draw_reliability(r, cfg);
  if (cfg.json) {
    nlohmann::json j = arcal::trace_calibration_report_json(trace, r);
    j["file"] = cfg.input;
    std::cout << j.dump(2) << "\n";
    for (const auto& f : drawn) std::cerr << "wrote " << f << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "arcal metrics: {}\n  n = {}, classes = {}, bins = {}, bootstrap = {}{}, label redraws = {}, seed = {}\n\n",
      cfg.input, r.n, r.classes, r.bins, r.draws,
      r.clusters > 0 ? fmt::format(" (whole clusters: {})", r.clusters) : "", r.consistency_draws, r.seed);
  if (trace.topk > 0)
    std::cout << "  outputs: " << arcal::trace_output_form(trace)
              << "; classwise_ece needs every class's probability and is not computed (nan)\n\n";
  // The value first is the plug-in one, the number netcal, torchmetrics and relplot report; for the
  // calibration errors the bias-corrected (median-unbiased) estimate and the interval follow, labelled.
  std::cout << fmt::format("  {:<14} {:>10}   {:>14}   {:>21}\n", "metric", "plug-in", "bias-corrected",
                           "95% interval");
  for (const auto& [name, member] : arcal::kReportMetrics) {
    const arcal::Estimate* e = &(r.*member);
    const std::string ci = std::isnan(e->ci.low) ? "-" : fmt::format("[{:.4f}, {:.4f}]", e->ci.low, e->ci.high);
    const bool corrected = !std::isnan(e->bias_corrected);
    std::cout << fmt::format("  {:<14} {:>10.4f}   {:>14}   {:>21}\n", name, e->value,
                             corrected ? fmt::format("{:.4f}", e->bias_corrected) : "-", ci);
  }
  if (!std::isnan(r.consistency_p))
    std::cout << fmt::format(
        "  consistency test (labels redrawn from the model's own probabilities): p = {:.3g} top-label, {:.3g} "
        "classwise\n"
        "  (calibration errors: the plug-in value is biased upward; the bias-corrected estimate is median-unbiased and "
        "the "
        "interval is for the population value, so the plug-in value may lie above it; the lower end is 0 when "
        "calibration is not rejected)\n",
        r.consistency_p, r.classwise_consistency_p);
  if (r.debiased_clipped) std::cout << "  (debiased_ece clipped at 0: the bias correction exceeded the raw estimate)\n";
  std::cout << fmt::format("\n  reliability (equal-width)\n  {:>3} {:>9} {:>8} {:>8}\n", "bin", "n", "conf", "acc");
  for (std::size_t b = 0; b < r.reliability.size(); ++b)
    if (r.reliability[b].n)
      std::cout << fmt::format("  {:>3} {:>9} {:>8.4f} {:>8.4f}\n", b, r.reliability[b].n, r.reliability[b].mean_conf,
                               r.reliability[b].accuracy);
  for (const auto& f : drawn) std::cout << "  wrote " << f << "\n";
  return 0;
}

/// Every option of `arcal metrics` (docs/interface.md "Command options", generated).
const arcal::OptionTable<MetricsConfig>& metrics_options() {
  using C = MetricsConfig;
  using O = arcal::Option<C>;
  namespace R = arcal::ranges;
  static const arcal::OptionTable<C> table = {
      O("file", "file", "Trace file (.npz)", &C::input).given().existing(O::Path::existing_file),
      {"bins", "--bins", "Confidence bins", &C::bins, R::metrics_bins},
      {"bootstrap", "--bootstrap", "Bootstrap resamples (0: none)", &C::bootstrap, R::bootstrap},
      {"seed", "--seed", "Bootstrap seed", &C::seed},
      {"json", "--json", "Print one JSON object", &C::json},
      {"figures", "--figures",
       "Also draw the reliability diagram (bins' counts, a calibrated model's consistency band) into "
       "DIR/reliability.{svg,png} (with its .dat and .gp); needs gnuplot",
       &C::figures},
      {"force", "--force", "Write --figures into a directory arcal did not make", &C::force},
  };
  return table;
}

ARCAL_COMMAND("metrics", "Calibration metrics of a trace file's predictions, with bootstrap intervals",
              [](CLI::App& app) -> arcal::cli::RunFn {
                auto cfg = std::make_shared<MetricsConfig>();
                arcal::cli::bind_options(app, metrics_options(), *cfg);
                return [cfg] { return run_metrics(*cfg); };
              });

}  // namespace
