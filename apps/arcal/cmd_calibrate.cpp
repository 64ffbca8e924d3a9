// `arcal calibrate F.npz --method M --out G.npz`: seeded class-stratified 50/50 split, fit a post-hoc
// calibrator (method.md §5) on the calibration half, write the evaluation half's calibrated probs,
// labels and the fitted parameters (a `calibrator` JSON string), and print before/after ECE and NLL.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "calib/calibrators.hpp"
#include "calib/metrics.hpp"
#include "command.hpp"
#include "core/error.hpp"
#include "core/paths.hpp"
#include "core/rng.hpp"
#include "flag_checks.hpp"
#include "io/npz.hpp"
#include "io/trace.hpp"

namespace {

struct CalibrateConfig {
  std::string input, method, out;
  std::uint64_t seed = 0;
  bool force = false;
};

std::vector<double> rows(const std::vector<double>& m, std::size_t k, const std::vector<std::size_t>& idx) {
  std::vector<double> out;
  out.reserve(idx.size() * k);
  for (auto i : idx) out.insert(out.end(), m.begin() + static_cast<std::ptrdiff_t>(i * k), m.begin() + static_cast<std::ptrdiff_t>((i + 1) * k));
  return out;
}

int run_calibrate(const CalibrateConfig& cfg) {
  // Before reading anything: the output must not be the input (same device and inode, so ./F, a
  // symlink or a hard link to F count too), and an existing output is replaced only with --force.
  arcal::check_output_not_input("--out", cfg.out, {cfg.input});
  arcal::check_output_file("--out", cfg.out, cfg.force);
  const arcal::Trace t = arcal::load_trace(cfg.input);
  const std::size_t K = t.classes;
  // Logits; for a probs-only trace log p serves (softmax(log p) = p), floored at 1e-300.
  std::vector<double> z = t.logits;
  if (z.empty()) {
    z.resize(t.probs.size());
    for (std::size_t i = 0; i < z.size(); ++i) z[i] = std::log(std::max(t.probs[i], 1e-300));
  }
  const auto probs = arcal::trace_probabilities(t);
  // Class-stratified split: within each class shuffle (seeded) and send the first half to calibration.
  std::vector<std::vector<std::size_t>> by_class(K);
  for (std::size_t i = 0; i < t.n; ++i) by_class[static_cast<std::size_t>(t.labels[i])].push_back(i);
  arcal::Rng rng(cfg.seed);
  std::vector<std::size_t> cal, ev;
  for (auto& v : by_class) {
    rng.shuffle(v);
    const std::size_t half = v.size() / 2;
    cal.insert(cal.end(), v.begin(), v.begin() + static_cast<std::ptrdiff_t>(half));
    ev.insert(ev.end(), v.begin() + static_cast<std::ptrdiff_t>(half), v.end());
  }
  std::sort(cal.begin(), cal.end());
  std::sort(ev.begin(), ev.end());
  if (cal.empty() || ev.empty()) throw arcal::InputError("calibrate: " + cfg.input + ": too few examples to split");
  auto pick_labels = [&](const std::vector<std::size_t>& idx) {
    std::vector<std::int64_t> y;
    for (auto i : idx) y.push_back(t.labels[i]);
    return y;
  };
  const auto zc = rows(z, K, cal), ze = rows(z, K, ev), pc = rows(probs, K, cal), pe = rows(probs, K, ev);
  const auto yc = pick_labels(cal), ye = pick_labels(ev);
  const auto tc = arcal::top_label(pc, cal.size(), K, yc), te = arcal::top_label(pe, ev.size(), K, ye);
  nlohmann::json params = {{"method", cfg.method}, {"seed", cfg.seed}, {"n_calibration", cal.size()}};
  std::vector<double> out;
  const std::string& m = cfg.method;
  if (m == "temperature") {
    const auto f = arcal::fit_temperature(zc, cal.size(), K, yc);
    params.update({{"temperature", f.temperature}, {"beta", f.beta}, {"converged", f.converged}, {"iterations", f.iterations}});
    if (!f.ok())
      throw std::runtime_error(fmt::format("calibrate: temperature scaling failed (beta = {}, converged = {})", f.beta, f.converged));
    out = arcal::softmax_scaled(ze, ev.size(), K, f.beta);
  } else if (m == "platt") {
    const auto f = arcal::fit_platt(tc.confidence, tc.correct);
    params.update({{"a", f.a}, {"b", f.b}, {"converged", f.converged}, {"iterations", f.iterations}});
    out = arcal::set_top_probability(pe, ev.size(), K, arcal::apply_platt(f, te.confidence));
  } else if (m == "isotonic") {
    const auto f = arcal::fit_isotonic(tc.confidence, tc.correct);
    params.update({{"x", f.x}, {"y", f.y}});
    out = arcal::set_top_probability(pe, ev.size(), K, arcal::apply_isotonic(f, te.confidence));
  } else if (m == "histogram") {
    const auto f = arcal::fit_histogram(tc.confidence, tc.correct, 15);
    params.update({{"bins", f.bins}, {"value", f.value}});
    out = arcal::set_top_probability(pe, ev.size(), K, arcal::apply_histogram(f, te.confidence));
  } else if (m == "nw") {
    // 1-D NW on logit c standardised by the calibration half, Scott bandwidth.
    auto lg = [](const std::vector<double>& c) {
      std::vector<double> x(c.size());
      for (std::size_t i = 0; i < c.size(); ++i) {
        const double p = std::min(std::max(c[i], 1e-12), 1 - 1e-12);
        x[i] = std::log(p / (1 - p));
      }
      return x;
    };
    const auto xc = lg(tc.confidence), xe = lg(te.confidence);
    const auto h = arcal::scott_bandwidths(xc, 1);
    params.update({{"feature", "logit_confidence"}, {"bandwidth", h[0]}, {"pseudo_count", 1.0}});
    out = arcal::set_top_probability(pe, ev.size(), K, arcal::nadaraya_watson(xc, tc.correct, 1, h, xe));
  } else if (m == "qats") {
    const auto f = arcal::fit_qats(zc, cal.size(), K, yc);
    params.update({{"temperature_knots", f.temperature}, {"direction", f.direction}, {"converged", f.converged},
                   {"iterations", f.iterations}, {"objective", f.objective}});
    out = arcal::apply_qats(f, ze, ev.size(), K);
  } else if (m == "vector" || m == "matrix") {
    const auto f = arcal::fit_linear_scaling(zc, cal.size(), K, yc, m == "vector");
    params.update({{"w", f.w}, {"b", f.b}, {"converged", f.converged}, {"iterations", f.iterations}, {"l2", 1e-4}});
    out = arcal::apply_linear_scaling(f, ze, ev.size());
  } else {
    throw arcal::InputError("calibrate: unknown method '" + m + "'");
  }
  const double ece0 = arcal::expected_calibration_error(te.confidence, te.correct);
  const double nll0 = arcal::negative_log_likelihood(pe, ev.size(), K, ye);
  const auto ta = arcal::top_label(out, ev.size(), K, ye);
  const double ece1 = arcal::expected_calibration_error(ta.confidence, ta.correct);
  const double nll1 = arcal::negative_log_likelihood(out, ev.size(), K, ye);
  std::vector<arcal::NpyArray> arrays = {
      arcal::NpyArray::from_double("probs", out, {ev.size(), K}),
      arcal::NpyArray::from_int64("labels", ye, {ev.size()}),
      arcal::NpyArray::from_strings("calibrator", {params.dump()}, {1}),
      arcal::NpyArray::scalar_string("meta", nlohmann::json({{"source", cfg.input}, {"calibrator", m}, {"split", "evaluation"}}).dump())};
  arcal::write_npz(cfg.out, arrays, true);
  std::cout << fmt::format("arcal calibrate: {} --method {} (seed {})\n  calibration n = {}, evaluation n = {}\n", cfg.input, m,
                           cfg.seed, cal.size(), ev.size());
  std::cout << fmt::format("  ECE (15 bins)  before {:.4f}  after {:.4f}\n  NLL            before {:.4f}  after {:.4f}\n", ece0,
                           ece1, nll0, nll1);
  std::cout << "  wrote " << cfg.out << "\n";
  return 0;
}

ARCAL_COMMAND("calibrate", "Fit a post-hoc calibrator on a calibration half and apply it to the evaluation half",
              [](CLI::App& app) -> arcal::cli::RunFn {
                auto cfg = std::make_shared<CalibrateConfig>();
                app.add_option("file", cfg->input, "Trace file (.npz)")->required()->check(CLI::ExistingFile);
                app.add_option("--method", cfg->method, "Calibrator")
                    ->required()
                    ->check(CLI::IsMember({"temperature", "platt", "isotonic", "histogram", "nw", "qats", "vector", "matrix"}));
                app.add_option("--out", cfg->out, "Output .npz (evaluation half)")->required();
                app.add_option("--seed", cfg->seed, "Split seed")->capture_default_str()->check(arcal::cli::seed_check());
                app.add_flag("--force", cfg->force, "Replace an existing --out file (never an input)");
                return [cfg] { return run_calibrate(*cfg); };
              });

}  // namespace
