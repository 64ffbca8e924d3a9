// The report of a classifier without routing to audit: one trace's metrics (`arcal metrics --json`) or
// the metrics before and after a post-hoc calibrator (`arcal calibrate --json`). Like the audit's
// sections, it formats what the document holds and recomputes nothing but each bin's consistency band.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/format.hpp"
#include "report/sections.hpp"

namespace arcal::report {

namespace {

using Row = std::pair<const char*, const Estimate CalibrationReport::*>;

/// The metrics of method.md §4 in the order `arcal metrics` prints them.
const std::vector<Row>& metric_rows() {
  static const std::vector<Row> rows = {{"accuracy", &CalibrationReport::accuracy},
                                        {"ECE", &CalibrationReport::ece},
                                        {"MCE", &CalibrationReport::mce},
                                        {"RMSCE", &CalibrationReport::rmsce},
                                        {"AdaECE", &CalibrationReport::ada_ece},
                                        {"classwise ECE", &CalibrationReport::classwise_ece},
                                        {"debiased ECE", &CalibrationReport::debiased_ece},
                                        {"smECE", &CalibrationReport::smece},
                                        {"smECE bandwidth", &CalibrationReport::smece_sigma},
                                        {"NLL", &CalibrationReport::nll},
                                        {"Brier", &CalibrationReport::brier},
                                        {"AUROC (correct vs wrong)", &CalibrationReport::auroc}};
  return rows;
}

/// The bias-corrected (median-unbiased) estimate of a calibration error, "-" where a metric has none
/// (method.md §4). The headline is the plug-in value, the number netcal, torchmetrics and relplot report.
std::string corrected(const Estimate& e) {
  return std::isfinite(e.bias_corrected) ? f4(e.bias_corrected) : std::string("-");
}

std::string file_label(const std::string& file) {
  return file.empty() ? std::string("the predictions") : std::filesystem::path(file).filename().string();
}

/// One sentence on the consistency test of the top label (labels redrawn from the model's own
/// probabilities), at the report's level.
std::string consistency_sentence(const CalibrationReport& m) {
  const Estimate& e = m.ece;
  const std::string ece =
      std::isfinite(e.bias_corrected)
          ? fmt::format("ECE-{} {} (plug-in, as other libraries report it; bias-corrected {}, 95 % CI {})", m.bins,
                        f4(e.value), f4(e.bias_corrected), ci(e.ci))
          : fmt::format("ECE-{} {} (plug-in)", m.bins, f4(e.value));
  if (!std::isfinite(m.consistency_p))
    return ece + "; no consistency test was run (it needs bootstrap draws: arcal metrics --bootstrap B)";
  const double alpha = 1.0 - m.level;
  return fmt::format(
      "{}; the consistency test (labels redrawn {} times from the model's own probabilities) gives p = {}: "
      "calibration of the top label is {} at the {:g} % level",
      ece, m.consistency_draws, pval(m.consistency_p), m.consistency_p < alpha ? "rejected" : "not rejected",
      100.0 * alpha);
}

/// The calibrator's fitted parameters in one sentence: its scalars (temperature, a, b, bandwidth, ...)
/// and the size of each array (isotonic thresholds, histogram values, a vector/matrix scaling's w).
std::string fitted_parameters(const std::string& calibrator_json) {
  const nlohmann::json j = nlohmann::json::parse(calibrator_json, nullptr, false);
  if (!j.is_object()) return "";
  std::vector<std::string> parts;
  for (const auto& [key, v] : j.items()) {
    if (key == "schema" || key == "method" || key == "classes" || key == "n_fit") continue;
    if (v.is_number_float())
      parts.push_back(fmt::format("{} = {:.6g}", key, v.get<double>()));
    else if (v.is_number_integer())
      parts.push_back(fmt::format("{} = {}", key, v.get<long long>()));
    else if (v.is_boolean())
      parts.push_back(fmt::format("{} = {}", key, v.get<bool>() ? "true" : "false"));
    else if (v.is_string())
      parts.push_back(fmt::format("{} = {}", key, v.get<std::string>()));
    else if (v.is_array())
      parts.push_back(fmt::format("{}: {} values", key, v.size()));
  }
  if (parts.empty()) return "";
  std::string out =
      "Fitted parameters (the full calibrator is the document's \"calibrator\" object, arcal calibrate --save): ";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out + ".";
}

std::string provenance(const Context& c, const CalibrationReport& m) {
  return fmt::format(
      "arcal {}; results: {}; report generated {}. Intervals: {} bootstrap resamples of the examples, seed {}, "
      "level {:g} % (docs/method.md §4).",
      ARCAL_VERSION, c.results_path, now_utc(), m.draws, m.seed, 100.0 * m.level);
}

SmoothPanel smooth_panel(const std::string& title, const CalibrationReport& m) {
  return SmoothPanel{fmt::format("{} (smECE {}, relplot's interval {})", title, f4(m.smece.value), ci(m.smece.ci)),
                     m.smooth.t,
                     m.smooth.accuracy,
                     m.smooth.low,
                     m.smooth.high,
                     m.smooth.density};
}

std::string smooth_caption(const CalibrationReport& m) {
  return fmt::format(
      "Smooth reliability diagram (Błasiok & Nakkiran; relplot's estimator): accuracy as a kernel "
      "regression on confidence, a Gaussian kernel reflected at 0 and 1 with smECE's bandwidth "
      "sigma* = {:.3g}{}; grey area: the density of the confidences (right axis). smECE is the mean "
      "distance of this curve from the diagonal, weighted by the density.",
      m.smooth.sigma,
      m.smooth.low.empty() ? ""
                           : fmt::format(", the band from {} bootstrap resamples ({:g} % percentile)", m.smooth.draws,
                                         100.0 * m.smooth.level));
}

Table bins_table(const CalibrationReport& m) {
  Table t{{"bin", "n", "mean confidence", "accuracy", "calibrated 95 % band"}, {}};
  const RelSeries s = reliability_series("", m.reliability);
  std::size_t b = 0;
  for (std::size_t i = 0; i < m.reliability.size(); ++i) {
    const auto& r = m.reliability[i];
    if (!r.n) continue;
    const RelPoint& p = s.rows[b++];
    t.rows.push_back({std::to_string(i), std::to_string(r.n), f4(r.mean_conf), f4(r.accuracy),
                      fmt::format("[{}, {}]", f4(p.band_low), f4(p.band_high))});
  }
  return t;
}

Section metrics_section(Context& c) {
  const auto& d = c.doc.calibration;
  const auto& m = d.before;
  Section s{"Calibration of " + file_label(d.file), {}};
  s.verdict(consistency_sentence(m) + ".");
  s.p(fmt::format(
      "{}: n = {} examples, K = {} classes, accuracy {} (95 % CI {}). A classifier's report: no routing was "
      "audited (arcal audit needs a routing trace; docs/interface.md).",
      d.file.empty() ? "predictions" : d.file, m.n, m.classes, f4(m.accuracy.value), ci(m.accuracy.ci)));
  Table t{{"metric", "value (plug-in)", "bias-corrected", "95 % CI"}, {}};
  for (const auto& [name, field] : metric_rows()) {
    const Estimate& e = m.*field;
    t.rows.push_back({name, f4(e.value), corrected(e), ci(e.ci)});
  }
  s.tab(t,
        "Every metric of docs/method.md §4. The value is the plug-in one, the number netcal, torchmetrics and "
        "relplot report. For the calibration errors it is biased upward by sampling noise: the bias-corrected "
        "column is the median-unbiased estimate, and the interval is for the population value (its lower end "
        "is 0 when calibration is not rejected), so the plug-in value may lie above it. smECE's interval is "
        "relplot's bootstrap interval, not a validated one (it undercovers: docs/method.md §4).");
  c.csv.push_back({"metrics.csv", t});
  reliability_figure(
      c.figures, "reliability", "Reliability: " + file_label(d.file),
      {RelPanel{fmt::format("top label (n = {})", m.n), {reliability_series("accuracy per bin", m.reliability)}}},
      m.bins);
  s.fig("reliability",
        fmt::format("Reliability diagram ({} equal-width bins): accuracy per bin against mean confidence, "
                    "the grey band where a calibrated model's accuracy falls in 95 % of draws for the "
                    "bin's count, and the examples per bin as bars (right axis).",
                    m.bins));
  if (m.has_smooth) {
    smooth_reliability_figure(c.figures, "smooth_reliability", "Smooth reliability: " + file_label(d.file),
                              {smooth_panel(fmt::format("top label (n = {})", m.n), m)});
    s.fig("smooth_reliability", smooth_caption(m));
  }
  const Table bt = bins_table(m);
  s.tab(bt, "The bins of the diagram (empty bins left out).");
  c.csv.push_back({"reliability.csv", bt});
  s.p(provenance(c, m));
  return s;
}

Section calibrate_section(Context& c) {
  const auto& d = c.doc.calibration;
  const auto& b = d.before;
  const auto& a = d.after;
  Section s{fmt::format("{} scaling of {}", d.method, file_label(d.file)), {}};
  const std::string fitted =
      d.mode == "split" ? fmt::format("fitted on a class-stratified half of {} (n = {})", d.file, d.n_fit)
      : d.mode == "fit"
          ? fmt::format("fitted on {} (n = {})", d.fit_file.empty() ? "the caller's arrays" : d.fit_file, d.n_fit)
          : fmt::format("read from {} (fitted on n = {})", d.params_file, d.n_fit);
  s.verdict(
      fmt::format("ECE-{} {} → {} (plug-in; bias-corrected {} → {}), NLL {} → {} on n = {} examples ({} calibrator "
                  "{}, applied to {}).",
                  b.bins, f4(b.ece.value), f4(a.ece.value), corrected(b.ece), corrected(a.ece), f4(b.nll.value),
                  f4(a.nll.value), b.n, d.method, fitted, d.mode == "split" ? "the other half" : d.file));
  for (const auto& w : d.warnings) s.p("Warning: " + w + ".");
  if (const std::string params = fitted_parameters(d.calibrator); !params.empty()) s.p(params);
  s.p("Before: " + consistency_sentence(b) + ". After: " + consistency_sentence(a) + ".");
  if (d.converged == 0)
    s.p("Warning: the calibrator's fit did not converge (converged: false in its parameters); read the after column "
        "with care.");
  if (a.accuracy.value != b.accuracy.value)
    s.p(fmt::format("Accuracy moved from {} to {}: the calibrator changed the predicted class of some examples.",
                    f4(b.accuracy.value), f4(a.accuracy.value)));
  Table t{{"metric", "before", "before, bias-corrected", "before, 95 % CI", "after", "after, bias-corrected",
           "after, 95 % CI", "after − before"},
          {}};
  for (const auto& [name, field] : metric_rows()) {
    const Estimate &x = b.*field, &y = a.*field;
    t.rows.push_back(
        {name, f4(x.value), corrected(x), ci(x.ci), f4(y.value), corrected(y), ci(y.ci), sgn(y.value - x.value)});
  }
  s.tab(t,
        "Every metric of docs/method.md §4 on the calibrated data, before and after: the plug-in value (what other "
        "libraries report), for calibration errors the median-unbiased estimate, and each column's own interval "
        "(not an interval of the difference; smECE's is relplot's bootstrap interval, not a validated one: "
        "docs/method.md §4).");
  c.csv.push_back({"calibration.csv", t});
  reliability_figure(
      c.figures, "reliability", "Before and after " + d.method + " scaling",
      {RelPanel{fmt::format("before (n = {})", b.n), {reliability_series("before", b.reliability)}},
       RelPanel{fmt::format("after {} (n = {})", d.method, a.n), {reliability_series("after", a.reliability)}}},
      b.bins);
  s.fig("reliability", fmt::format("Reliability before and after ({} equal-width bins; grey: a calibrated model's 95 % "
                                   "band for each bin's count; bars: examples per bin).",
                                   b.bins));
  if (b.has_smooth && a.has_smooth) {
    smooth_reliability_figure(c.figures, "smooth_reliability",
                              "Smooth reliability before and after " + d.method + " scaling",
                              {smooth_panel(fmt::format("before (n = {})", b.n), b),
                               smooth_panel(fmt::format("after {} (n = {})", d.method, a.n), a)});
    s.fig("smooth_reliability", smooth_caption(b));
  }
  c.csv.push_back({"reliability_before.csv", bins_table(b)});
  c.csv.push_back({"reliability_after.csv", bins_table(a)});
  s.p(provenance(c, b));
  return s;
}

}  // namespace

Document calibration_document(Context& c) {
  Document d;
  const auto& cal = c.doc.calibration;
  d.title = cal.calibrated ? "arcal calibration report: " + cal.method + " scaling of " + file_label(cal.file)
                           : "arcal calibration report: " + file_label(cal.file);
  d.sections.push_back(cal.calibrated ? calibrate_section(c) : metrics_section(c));
  return d;
}

}  // namespace arcal::report
