// `arcal calibrate`: post-hoc calibration (method.md §5) in three modes, all through
// calib/fitted_calibrator.hpp (the Python module's Calibrator uses the same code):
//   F.npz --method M --out G.npz             seeded class-stratified 50/50 split of one file: fit on the
//                                            calibration half, write the evaluation half (a quick look);
//   --fit VAL.npz --apply TEST.npz --method M --out G.npz
//                                            fit on one file, apply to another (sklearn's fit/transform);
//   --params P.json --apply TEST.npz --out G.npz
//                                            apply a calibrator saved with --save.
// Applied files keep every array (features, ids, routing, meta, ...) beside the calibrated `probs`.
#include <cstdio>
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "calib/binning.hpp"
#include "calib/fitted_calibrator.hpp"
#include "calib/metrics.hpp"
#include "calib/report_json.hpp"
#include "command.hpp"
#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/paths.hpp"
#include "core/rng.hpp"
#include "core/text_input.hpp"
#include "option_binding.hpp"
#include "io/npz.hpp"
#include "io/trace.hpp"
#include "report/plots.hpp"

namespace {

namespace fs = std::filesystem;

struct CalibrateConfig {
  std::string input, fit, apply, params, save, method, out;
  std::string figures;  ///< --figures DIR: reliability diagrams before and after ("" = none)
  std::uint64_t seed = 0;
  int bins = 15;
  int bootstrap = 1000;
  bool json = false;
  bool force = false;
};

enum class Mode { split, fit_apply, params_apply };

Mode check_mode(const CalibrateConfig& c) {
  const auto fail = [](const std::string& flag, const std::string& msg) { arcal::throw_input(flag, msg); };
  Mode mode;
  if (!c.params.empty()) {
    if (!c.input.empty() || !c.fit.empty())
      fail("--params", "takes no trace to fit on (give P.json and --apply TEST.npz, without FILE or --fit)");
    if (c.apply.empty()) fail("--params", "needs --apply TEST.npz, the file to calibrate");
    if (!c.method.empty()) fail("--method", "is not taken with --params (P.json names the method)");
    if (!c.save.empty()) fail("--save", "is not taken with --params (the calibrator is already saved)");
    mode = Mode::params_apply;
  } else if (!c.fit.empty() || !c.apply.empty()) {
    if (!c.input.empty()) fail("FILE", "is not taken with --fit/--apply (FILE alone splits one file in halves)");
    if (c.fit.empty()) fail("--apply", "needs --fit VAL.npz (or --params P.json) to say what to apply");
    if (c.apply.empty()) fail("--fit", "needs --apply TEST.npz, the file to calibrate");
    mode = Mode::fit_apply;
  } else {
    if (c.input.empty())
      fail("arcal calibrate", "give FILE, or --fit VAL.npz --apply TEST.npz, or --params P.json --apply TEST.npz");
    mode = Mode::split;
  }
  if (mode != Mode::params_apply && c.method.empty()) fail("--method", "is required to fit a calibrator");
  // Outputs never overwrite inputs (run_calibrate: core/paths.hpp, by device and inode) nor each other
  // (resolved paths: G.npz, $PWD/G.npz and sub/../G.npz are one file).
  arcal::check_distinct_outputs({{"--out", c.out}, {"--save", c.save}, {"--figures", c.figures}});
  return mode;
}

arcal::Predictions trace_predictions(const arcal::Trace& t) {
  const std::string ctx = "calibrate: " + t.path;
  // A post-hoc calibrator maps the whole output vector; the top-k form has only its head.
  if (t.topk > 0) (void)arcal::trace_probabilities(t, "calibrate: fitting or applying a calibrator");
  return t.logits.empty() ? arcal::predictions_from_probs(t.probs, t.n, t.classes, ctx)
                          : arcal::predictions_from_logits(t.logits, t.n, t.classes, ctx);
}

/// Class-stratified split: within each class shuffle (seeded) and send the first half to calibration.
void stratified_halves(const arcal::Trace& t, std::uint64_t seed, std::vector<std::size_t>& cal,
                       std::vector<std::size_t>& ev) {
  std::vector<std::vector<std::size_t>> by_class(t.classes);
  for (std::size_t i = 0; i < t.n; ++i) by_class[static_cast<std::size_t>(t.labels[i])].push_back(i);
  arcal::Rng rng(seed);
  for (auto& v : by_class) {
    rng.shuffle(v);
    const std::size_t half = v.size() / 2;
    cal.insert(cal.end(), v.begin(), v.begin() + static_cast<std::ptrdiff_t>(half));
    ev.insert(ev.end(), v.begin() + static_cast<std::ptrdiff_t>(half), v.end());
  }
  std::sort(cal.begin(), cal.end());
  std::sort(ev.begin(), ev.end());
  if (cal.empty() || ev.empty()) throw arcal::InputError("calibrate: " + t.path + ": too few examples to split");
}

std::vector<std::int64_t> pick(const std::vector<std::int64_t>& y, const std::vector<std::size_t>& idx) {
  std::vector<std::int64_t> out;
  out.reserve(idx.size());
  for (auto i : idx) out.push_back(y[i]);
  return out;
}

/// Every array of the applied file, with the scores replaced by the calibrated `probs`: the original
/// `logits` (or `probs`) are kept as `logits_uncalibrated` (`probs_uncalibrated`) unless the file
/// already holds such an array (it was calibrated before: the first uncalibrated scores are kept), and
/// `calibrator` (the JSON, as a [1] string array) replaces any earlier one.
std::vector<arcal::NpyArray> carry_arrays(const std::string& path, const std::vector<double>& probs, std::size_t n,
                                          std::size_t k, const std::string& calibrator) {
  std::vector<arcal::NpyArray> in = arcal::read_npz(path), out;
  bool has_uncalibrated = false;
  for (const auto& a : in) has_uncalibrated |= a.name == "logits_uncalibrated" || a.name == "probs_uncalibrated";
  for (auto& a : in) {
    if (a.name == "calibrator") continue;
    if (a.name == "logits" || a.name == "probs") {
      out.push_back(arcal::NpyArray::from_double("probs", probs, {n, k}));
      if (!has_uncalibrated) {
        a.name += "_uncalibrated";
        out.push_back(std::move(a));
      }
      continue;
    }
    out.push_back(std::move(a));
  }
  out.push_back(arcal::NpyArray::from_strings("calibrator", {calibrator}, {1}));
  return out;
}

nlohmann::json report(const std::vector<double>& probs, std::size_t n, std::size_t k,
                      const std::vector<std::int64_t>& y, const CalibrateConfig& cfg) {
  arcal::ReportOptions opt;
  opt.bins = cfg.bins;
  opt.draws = cfg.bootstrap;
  opt.smooth_diagram = true;  // the report draws relplot's smooth diagram beside the binned one
  opt.seed = cfg.seed;
  return arcal::calibration_report_json(arcal::calibration_report(probs, n, k, y, opt));
}

int run_calibrate(const CalibrateConfig& cfg) {
  const Mode mode = check_mode(cfg);
  // Before reading anything: no output may be an input (same device and inode, so ./F, a symlink or a
  // hard link to F count too), and an existing output is replaced only with --force.
  std::vector<std::string> inputs;
  for (const auto* f : {&cfg.input, &cfg.fit, &cfg.apply, &cfg.params})
    if (!f->empty()) inputs.push_back(*f);
  arcal::check_output_not_input("--out", cfg.out, inputs);
  arcal::check_output_file("--out", cfg.out, cfg.force);
  if (!cfg.save.empty()) {
    arcal::check_output_not_input("--save", cfg.save, inputs);
    arcal::check_output_file("--save", cfg.save, cfg.force);
  }
  if (!cfg.figures.empty()) {
    arcal::check_output_dir("--figures", cfg.figures, "arcal calibrate", cfg.force, "--force");
  }
  arcal::FittedCalibrator cal;
  nlohmann::json cal_json;
  // What the calibrator is applied to: predictions, labels, and (apply modes) the file they came from.
  arcal::Predictions target;
  std::vector<std::int64_t> target_labels;
  std::string target_file;
  std::size_t n_fit = 0;
  if (mode == Mode::split) {
    const arcal::Trace t = arcal::load_trace(cfg.input);
    const auto all = trace_predictions(t);
    std::vector<std::size_t> cal_rows, ev_rows;
    stratified_halves(t, cfg.seed, cal_rows, ev_rows);
    cal = arcal::fit_calibrator(cfg.method, arcal::select_rows(all, cal_rows), pick(t.labels, cal_rows));
    cal_json = arcal::calibrator_json(cal);
    cal_json["seed"] = cfg.seed;
    cal_json["split"] = "class-stratified half of " + cfg.input;
    target = arcal::select_rows(all, ev_rows);
    target_labels = pick(t.labels, ev_rows);
    target_file = cfg.input;
    n_fit = cal_rows.size();
  } else {
    if (mode == Mode::fit_apply) {
      const arcal::Trace v = arcal::load_trace(cfg.fit);
      cal = arcal::fit_calibrator(cfg.method, trace_predictions(v), v.labels);
      cal_json = arcal::calibrator_json(cal);
      n_fit = v.n;
    } else {
      // The capped JSON reader (size and nesting before parsing: core/text_input.hpp).
      const nlohmann::json j = arcal::read_json_file(cfg.params, "--params", "calibrator parameters");
      cal = arcal::calibrator_from_json(j, "--params " + cfg.params);
      cal_json = j;
      n_fit = cal.n_fit;
    }
    const arcal::Trace t = arcal::load_trace(cfg.apply);
    if (t.classes != cal.classes)
      arcal::throw_input("--apply",
                         cfg.apply + " has K = " + std::to_string(t.classes) +
                             " classes, but the calibrator was fitted on K = " + std::to_string(cal.classes));
    target = trace_predictions(t);
    target_labels = t.labels;
    target_file = cfg.apply;
  }
  if (!cal.warning.empty()) std::fprintf(stderr, "arcal: warning: calibrate: %s\n", cal.warning.c_str());
  const std::size_t n = target.n, K = target.k;
  const std::vector<double> out = arcal::apply_calibrator(cal, target);
  // Nothing is written before everything is checked: the calibrated rows must be probabilities that
  // `arcal metrics` reads back (the trace rule: in [0, 1], rows summing to 1 within 1e-4), and the
  // before/after reports are computed first (a bad --params used to leave an unreadable --out).
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0;
    for (std::size_t k = 0; k < K; ++k) {
      const double v = out[i * K + k];
      if (!(v >= 0.0 && v <= 1.0))
        arcal::throw_input("calibrate", "the calibrator gives probability " + std::to_string(v) + " at row " +
                                            std::to_string(i) + ", class " + std::to_string(k) +
                                            " (must be in [0, 1]); nothing was written");
      sum += v;
    }
    if (std::fabs(sum - 1.0) > 1e-4)
      arcal::throw_input("calibrate", "the calibrated row " + std::to_string(i) + " sums to " + std::to_string(sum) +
                                          " (must be 1 within 1e-4); nothing was written");
  }
  nlohmann::json before, after;  // --json: computed before anything is written (they check the rows too)
  if (cfg.json) {
    before = report(target.probs, n, K, target_labels, cfg);
    after = report(out, n, K, target_labels, cfg);
  }
  const std::string cal_text = cal_json.dump();
  if (mode == Mode::split) {
    arcal::write_npz(
        cfg.out,
        {arcal::NpyArray::from_double("probs", out, {n, K}), arcal::NpyArray::from_int64("labels", target_labels, {n}),
         arcal::NpyArray::from_strings("calibrator", {cal_text}, {1}),
         arcal::NpyArray::scalar_string(
             "meta",
             nlohmann::json({{"source", cfg.input}, {"calibrator", cal.method}, {"split", "evaluation"}}).dump())},
        true);
  } else {
    arcal::write_npz(cfg.out, carry_arrays(cfg.apply, out, n, K, cal_text), true);
  }
  if (!cfg.save.empty()) arcal::write_file_atomic(cfg.save, cal_json.dump(2) + "\n");
  std::vector<std::string> drawn;
  if (!cfg.figures.empty()) {
    // Before and after on the data calibrated (the evaluation half in split mode): the same bins and
    // consistency band as `arcal metrics --figures` and the report.
    auto table = [&](const std::vector<double>& probs) {
      const auto t = arcal::top_label(probs, n, K, target_labels);
      return arcal::bin_table(t.confidence, t.correct, arcal::equal_width_bins(t.confidence, cfg.bins), cfg.bins);
    };
    std::error_code ec;
    fs::create_directories(cfg.figures, ec);
    if (ec) arcal::throw_input("--figures", "cannot create " + cfg.figures + ": " + ec.message());
    arcal::mark_output_dir(cfg.figures, "arcal calibrate");
    arcal::report::Figures figs(cfg.figures);
    arcal::report::reliability_figure(
        figs, "reliability", "before and after " + cal.method + " scaling",
        {arcal::report::RelPanel{"before", {arcal::report::reliability_series("before", table(target.probs))}},
         arcal::report::RelPanel{"after " + cal.method, {arcal::report::reliability_series("after", table(out))}}},
        cfg.bins);
    drawn = figs.paths;
  }
  if (cfg.json) {
    const char* mode_name = mode == Mode::split ? "split" : mode == Mode::fit_apply ? "fit" : "params";
    auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
    nlohmann::json j = {{"schema", arcal::kCalibrateSchema},
                        {"mode", mode_name},
                        {"method", cal.method},
                        {"fit_file", mode == Mode::split ? or_null(cfg.input) : or_null(cfg.fit)},
                        {"params_file", or_null(cfg.params)},
                        {"apply_file", target_file},
                        {"out", cfg.out},
                        {"save", or_null(cfg.save)},
                        {"n_fit", n_fit},
                        {"n_apply", n},
                        {"calibrator", cal_json},
                        {"before", before},
                        {"after", after}};
    if (!cal.warning.empty()) j["warnings"] = nlohmann::json::array({cal.warning});
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  const auto t0 = arcal::top_label(target.probs, n, K, target_labels), t1 = arcal::top_label(out, n, K, target_labels);
  const double ece0 = arcal::expected_calibration_error(t0.confidence, t0.correct, cfg.bins);
  const double ece1 = arcal::expected_calibration_error(t1.confidence, t1.correct, cfg.bins);
  const double nll0 = arcal::negative_log_likelihood(target.probs, n, K, target_labels);
  const double nll1 = arcal::negative_log_likelihood(out, n, K, target_labels);
  if (mode == Mode::split)
    std::cout << fmt::format("arcal calibrate: {} --method {} (seed {})\n  calibration n = {}, evaluation n = {}\n",
                             cfg.input, cal.method, cfg.seed, n_fit, n);
  else
    std::cout << fmt::format("arcal calibrate: {} {} --apply {} --method {}\n  fitted on n = {}, applied to n = {}\n",
                             mode == Mode::fit_apply ? "--fit" : "--params",
                             mode == Mode::fit_apply ? cfg.fit : cfg.params, cfg.apply, cal.method, n_fit, n);
  std::cout << fmt::format(
      "  ECE ({} bins)  before {:.4f}  after {:.4f}\n  NLL            before {:.4f}  after {:.4f}\n", cfg.bins, ece0,
      ece1, nll0, nll1);
  if (!cal.warning.empty()) std::cout << "  warning: " << cal.warning << "\n";
  std::cout << "  wrote " << cfg.out << (cfg.save.empty() ? "" : " and " + cfg.save) << "\n";
  for (const auto& f : drawn) std::cout << "  wrote " << f << "\n";
  return 0;
}

/// Every option of `arcal calibrate` (docs/interface.md "Command options", generated).
const arcal::OptionTable<CalibrateConfig>& calibrate_options() {
  using C = CalibrateConfig;
  using O = arcal::Option<C>;
  namespace R = arcal::ranges;
  constexpr auto file = O::Path::existing_file;
  static const arcal::OptionTable<C> table = {
      O("file", "file", "Trace file (.npz) to split in halves: fit on one, apply to the other", &C::input)
          .existing(file),
      O("fit", "--fit", "Trace file (.npz) to fit the calibrator on (with --apply)", &C::fit).existing(file),
      O("apply", "--apply", "Trace file (.npz) to calibrate (with --fit or --params)", &C::apply).existing(file),
      O("params", "--params", "A calibrator saved with --save (JSON), applied to --apply", &C::params).existing(file),
      {"method",
       "--method",
       "Calibrator (not with --params)",
       &C::method,
       {},
       {"temperature", "platt", "isotonic", "histogram", "nw", "qats", "vector", "matrix"}},
      O("out", "--out",
        "Output .npz: the calibrated probs (split: the evaluation half; apply: every array of the file)", &C::out)
          .given(),
      {"save", "--save", "Also write the fitted calibrator (JSON, schema arcal.calibrator/1)", &C::save},
      {"seed", "--seed", "Split seed (and bootstrap seed of --json)", &C::seed},
      {"bins", "--bins", "Confidence bins of the reported ECE", &C::bins, R::metrics_bins},
      {"bootstrap", "--bootstrap", "Bootstrap resamples of the --json metrics (0: none)", &C::bootstrap, R::bootstrap},
      {"json", "--json", "Print one JSON object: the calibrator and metrics before/after", &C::json},
      {"force", "--force", "Replace an existing --out or --save file (never an input)", &C::force},
      {"figures", "--figures",
       "Also draw the reliability diagrams before and after calibration (bins' counts, consistency band) into "
       "DIR/reliability.{svg,png}; needs gnuplot",
       &C::figures},
  };
  return table;
}

ARCAL_COMMAND("calibrate",
              "Fit a post-hoc calibrator and apply it: to one file's other half, or fitted on one file and applied "
              "to another",
              [](CLI::App& app) -> arcal::cli::RunFn {
                auto cfg = std::make_shared<CalibrateConfig>();
                arcal::cli::bind_options(app, calibrate_options(), *cfg);
                return [cfg] { return run_calibrate(*cfg); };
              });

}  // namespace
