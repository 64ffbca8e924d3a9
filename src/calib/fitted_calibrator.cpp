#include "calib/fitted_calibrator.hpp"

#include <algorithm>
#include <cmath>
#include <climits>
#include <sstream>
#include <stdexcept>

#include "calib/metrics.hpp"
#include "core/check.hpp"
#include "core/limits.hpp"

namespace arcal {

namespace {

std::string num(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

void check_sizes(const std::string& ctx, const char* name, std::size_t size, std::size_t n, std::size_t k) {
  if (n == 0) throw_input(ctx, std::string(name) + " has no rows (N = 0)");
  if (k < 2) throw_input(ctx, std::string(name) + " has K = " + std::to_string(k) + " columns, but needs >= 2");
  if (size != n * k)
    throw_input(ctx,
                std::string(name) + " has " + std::to_string(size) + " values, but N*K = " + std::to_string(n * k));
}

// logit(c) with c clipped to [1e-12, 1 - 1e-12]: the nw calibrator's feature.
std::vector<double> logit_confidence(const std::vector<double>& c) {
  std::vector<double> x(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) {
    const double p = std::min(std::max(c[i], 1e-12), 1 - 1e-12);
    x[i] = std::log(p / (1 - p));
  }
  return x;
}

// Top-label confidence of every row (labels are not needed to apply a calibrator).
std::vector<double> confidences(const Predictions& p) {
  std::vector<double> c(p.n);
  for (std::size_t i = 0; i < p.n; ++i) c[i] = *std::max_element(&p.probs[i * p.k], &p.probs[i * p.k] + p.k);
  return c;
}

void check_options(const CalibratorOptions& o) {
  const char* fn = "calibrator";
  if (!in_range(ranges::calibrator_bins, o.bins))
    throw_input(fn, "bins is " + std::to_string(o.bins) + ", but must be in " + range_text(ranges::calibrator_bins));
  if (!in_range(ranges::calibrator_knots, o.knots))
    throw_input(fn, "knots is " + std::to_string(o.knots) + ", but must be in " + range_text(ranges::calibrator_knots));
  if (!(o.l2 >= 0) || !std::isfinite(o.l2)) throw_input(fn, "l2 is " + num(o.l2) + ", but must be finite and >= 0");
  if (!(o.pseudo_count >= 0) || !std::isfinite(o.pseudo_count))
    throw_input(fn, "pseudo_count is " + num(o.pseudo_count) + ", but must be finite and >= 0");
}

// ---- reading JSON back, every problem named by context and key
struct Reader {
  const nlohmann::json& j;
  std::string ctx;
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    throw_input(ctx, "key '" + key + "' " + what);
  }
  const nlohmann::json& at(const std::string& key) const {
    if (!j.contains(key)) bad(key, "is missing");
    return j.at(key);
  }
  double number(const std::string& key) const {
    const auto& v = at(key);
    if (!v.is_number()) bad(key, "is " + v.dump() + ", but must be a number");
    return v.get<double>();
  }
  std::int64_t integer(const std::string& key, std::int64_t lo) const {
    const auto& v = at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < lo)
      bad(key, "is " + v.dump() + ", but must be an integer >= " + std::to_string(lo));
    return v.get<std::int64_t>();
  }
  /// numbers(key, size), each finite and in [lo, hi].
  std::vector<double> numbers_in(const std::string& key, double lo, double hi, std::size_t size = SIZE_MAX) const {
    auto v = numbers(key, size);
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]) || v[i] < lo || v[i] > hi)
        throw_input(ctx, "key '" + key + "'[" + std::to_string(i) + "] is " + num(v[i]) +
                             ", but must be finite and in [" + num(lo) + ", " + num(hi) + "]");
    return v;
  }
  std::vector<double> finite_numbers(const std::string& key, std::size_t size = SIZE_MAX) const {
    auto v = numbers(key, size);
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]))
        throw_input(ctx, "key '" + key + "'[" + std::to_string(i) + "] is " + num(v[i]) + ", but must be finite");
    return v;
  }
  std::vector<double> numbers(const std::string& key, std::size_t size = SIZE_MAX) const {
    const auto& v = at(key);
    if (!v.is_array()) bad(key, "must be an array of numbers");
    std::vector<double> out;
    out.reserve(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number()) bad(key, "[" + std::to_string(i) + "] is " + v[i].dump() + ", but must be a number");
      out.push_back(v[i].get<double>());
    }
    if (size != SIZE_MAX && out.size() != size)
      bad(key, "has " + std::to_string(out.size()) + " entries, but must have " + std::to_string(size));
    return out;
  }
};

}  // namespace

Predictions predictions_from_logits(std::vector<double> logits, std::size_t n, std::size_t k, const std::string& ctx) {
  check_sizes(ctx, "logits", logits.size(), n, k);
  Predictions p;
  p.n = n;
  p.k = k;
  p.probs.resize(n * k);
  for (std::size_t i = 0; i < n; ++i) {
    const double* z = &logits[i * k];
    for (std::size_t c = 0; c < k; ++c)
      if (!std::isfinite(z[c]))
        throw_input(ctx, "logits[" + std::to_string(i) + ", " + std::to_string(c) + "] is " + num(z[c]) +
                             ", but must be finite");
    // The same arithmetic as trace_probabilities (io/trace.hpp), so the CLI's numbers do not move.
    double* out = &p.probs[i * k];
    const double m = *std::max_element(z, z + k);
    double s = 0.0;
    for (std::size_t c = 0; c < k; ++c) s += (out[c] = std::exp(z[c] - m));
    const double inv = 1.0 / s;
    for (std::size_t c = 0; c < k; ++c) out[c] *= inv;
  }
  p.logits = std::move(logits);
  return p;
}

Predictions predictions_from_probs(std::vector<double> probs, std::size_t n, std::size_t k, const std::string& ctx) {
  check_sizes(ctx, "probs", probs.size(), n, k);
  Predictions p;
  p.n = n;
  p.k = k;
  p.logits.resize(n * k);
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (std::size_t c = 0; c < k; ++c) {
      const double v = probs[i * k + c];
      if (!(v >= 0.0 && v <= 1.0))
        throw_input(ctx, "probs[" + std::to_string(i) + ", " + std::to_string(c) + "] is " + num(v) +
                             ", but must be in [0, 1]");
      sum += v;
      p.logits[i * k + c] = std::log(std::max(v, 1e-300));
    }
    if (std::fabs(sum - 1.0) > 1e-4)
      throw_input(ctx, "probs row " + std::to_string(i) + " sums to " + num(sum) + ", but must sum to 1 (within 1e-4)");
  }
  p.probs = std::move(probs);
  return p;
}

Predictions select_rows(const Predictions& p, const std::vector<std::size_t>& idx) {
  Predictions out;
  out.n = idx.size();
  out.k = p.k;
  auto pick = [&](const std::vector<double>& m, std::vector<double>& dst) {
    dst.reserve(idx.size() * p.k);
    for (auto i : idx)
      dst.insert(dst.end(), m.begin() + static_cast<std::ptrdiff_t>(i * p.k),
                 m.begin() + static_cast<std::ptrdiff_t>((i + 1) * p.k));
  };
  pick(p.logits, out.logits);
  pick(p.probs, out.probs);
  return out;
}

const std::vector<std::string>& calibrator_methods() {
  static const std::vector<std::string> m = {"temperature", "platt", "isotonic", "histogram",
                                             "nw",          "qats",  "vector",   "matrix"};
  return m;
}

FittedCalibrator fit_calibrator(const std::string& method, const Predictions& p,
                                const std::vector<std::int64_t>& labels, const CalibratorOptions& options) {
  const auto& methods = calibrator_methods();
  if (std::find(methods.begin(), methods.end(), method) == methods.end())
    throw_input("calibrate",
                "unknown method '" + method + "' (temperature, platt, isotonic, histogram, nw, qats, vector, matrix)");
  check_options(options);
  check_sizes("calibrate", "the predictions", p.probs.size(), p.n, p.k);
  if (p.n < 2)
    throw_input("calibrate", "the fitting data has N = " + std::to_string(p.n) +
                                 " example; a calibrator needs at least 2 to fit (and " +
                                 std::to_string(kFewFitExamples) + " or more to be trusted)");
  FittedCalibrator f;
  f.method = method;
  f.classes = p.k;
  f.n_fit = p.n;
  f.options = options;
  const std::size_t n = p.n, K = p.k;
  if (method == "temperature") {
    f.temperature = fit_temperature(p.logits, n, K, labels);
    if (!f.temperature.ok()) {
      const TemperatureFit& t = f.temperature;
      const std::string why =
          !(t.beta > 0)
              ? "the NLL is smallest at beta = 1/T = " + num(t.beta) +
                    " <= 0: the logits rank the labels worse than chance (a higher logit means less likely), which "
                    "no positive temperature can calibrate; check that the labels match the logits' class order"
              : "Newton's method on beta did not converge in " + std::to_string(t.iterations) +
                    " iterations (beta = " + num(t.beta) + ", NLL " + num(t.nll) +
                    "); the logits may be nearly constant or hold extreme values";
      throw std::runtime_error("calibrate: temperature scaling failed: " + why);
    }
  } else if (method == "qats") {
    f.qats = fit_qats(p.logits, n, K, labels, options.knots);
  } else if (method == "vector" || method == "matrix") {
    f.linear = fit_linear_scaling(p.logits, n, K, labels, method == "vector", options.l2);
  } else {
    const TopLabel t = top_label(p.probs, n, K, labels);
    if (method == "platt") {
      f.platt = fit_platt(t.confidence, t.correct);
    } else if (method == "isotonic") {
      f.isotonic = fit_isotonic(t.confidence, t.correct);
    } else if (method == "histogram") {
      f.histogram = fit_histogram(t.confidence, t.correct, options.bins);
    } else {  // nw
      f.kernel_x = logit_confidence(t.confidence);
      f.kernel_correct = t.correct;
      f.kernel_bandwidth = scott_bandwidths(f.kernel_x, 1)[0];
    }
  }
  f.warning = fit_warning(f, p, labels);
  return f;
}

std::string fit_warning(const FittedCalibrator& f, const Predictions& p, const std::vector<std::int64_t>& labels) {
  const std::string& m = f.method;
  std::string w;
  auto add = [&](const std::string& s) { w += (w.empty() ? "" : "; ") + s; };
  bool converged = true;
  int iterations = 0;
  if (m == "platt") converged = f.platt.converged, iterations = f.platt.iterations;
  if (m == "qats") converged = f.qats.converged, iterations = f.qats.iterations;
  if (m == "vector" || m == "matrix") converged = f.linear.converged, iterations = f.linear.iterations;
  if (p.n < kFewFitExamples)
    add("fitted on only " + std::to_string(p.n) + " examples (fewer than " + std::to_string(kFewFitExamples) +
        "): its parameters are unreliable");
  if (m == "platt" || m == "isotonic" || m == "histogram" || m == "nw") {
    // The binary methods fit the top label's correctness: with one outcome only they map every
    // confidence to 0 or 1.
    std::size_t correct = 0;
    for (std::size_t i = 0; i < p.n; ++i) {
      const double* row = &p.probs[i * p.k];
      const auto top = static_cast<std::int64_t>(std::max_element(row, row + p.k) - row);
      correct += top == labels[i] ? 1 : 0;
    }
    if (correct == 0 || correct == p.n)
      add(std::string("every fitting example's top label is ") + (correct == 0 ? "wrong" : "correct") + ", so " + m +
          " maps every confidence to " + (correct == 0 ? "0" : "1"));
  }
  if (!converged)
    add(m + " did not converge in " + std::to_string(iterations) +
        " iterations (converged: false); the parameters are the last iterate's");
  // The fitted calibrator against none, on the data it was fitted on: worse there means the fit failed.
  const std::vector<double> q = apply_calibrator(f, p);
  double before = 0.0, after = 0.0;
  for (std::size_t i = 0; i < p.n; ++i) {
    const std::size_t y = static_cast<std::size_t>(labels[i]);
    before -= std::log(std::max(p.probs[i * p.k + y], 1e-300));
    after -= std::log(std::max(q[i * p.k + y], 1e-300));
  }
  before /= static_cast<double>(std::max<std::size_t>(p.n, 1));
  after /= static_cast<double>(std::max<std::size_t>(p.n, 1));
  // Only the methods that minimise the multiclass NLL (with a ridge towards the identity at most)
  // promise not to raise it; Platt and the binning methods fit the top label's correctness.
  const bool nll_method = m == "temperature" || m == "vector" || m == "matrix";
  if (nll_method && after > before + 1e-6 * (1.0 + before))
    add("the calibrated NLL on the fitting data, " + num(after) + ", is worse than the uncalibrated " + num(before));
  return w;
}

std::vector<double> apply_calibrator(const FittedCalibrator& f, const Predictions& p) {
  check_sizes("apply calibrator", "the predictions", p.probs.size(), p.n, p.k);
  if (p.k != f.classes)
    throw_input("apply calibrator", "the calibrator was fitted on K = " + std::to_string(f.classes) +
                                        " classes, but the predictions have K = " + std::to_string(p.k));
  const std::size_t n = p.n, K = p.k;
  const std::string& m = f.method;
  if (m == "temperature") return softmax_scaled(p.logits, n, K, f.temperature.beta);
  if (m == "qats") return apply_qats(f.qats, p.logits, n, K);
  if (m == "vector" || m == "matrix") return apply_linear_scaling(f.linear, p.logits, n);
  const auto c = confidences(p);
  std::vector<double> q;
  if (m == "platt") {
    q = apply_platt(f.platt, c);
  } else if (m == "isotonic") {
    q = apply_isotonic(f.isotonic, c);
  } else if (m == "histogram") {
    q = apply_histogram(f.histogram, c);
  } else if (m == "nw") {
    NadarayaWatsonOptions o;
    o.pseudo_count = f.options.pseudo_count;
    q = nadaraya_watson(f.kernel_x, f.kernel_correct, 1, {f.kernel_bandwidth}, logit_confidence(c), o);
  } else {
    throw_input("apply calibrator", "unknown method '" + m + "'");
  }
  return set_top_probability(p.probs, n, K, q);
}

nlohmann::json calibrator_json(const FittedCalibrator& f) {
  nlohmann::json j = {
      {"schema", kCalibratorSchema}, {"method", f.method}, {"classes", f.classes}, {"n_calibration", f.n_fit}};
  const std::string& m = f.method;
  if (m == "temperature") {
    j.update({{"temperature", f.temperature.temperature},
              {"beta", f.temperature.beta},
              {"converged", f.temperature.converged},
              {"iterations", f.temperature.iterations}});
  } else if (m == "platt") {
    j.update(
        {{"a", f.platt.a}, {"b", f.platt.b}, {"converged", f.platt.converged}, {"iterations", f.platt.iterations}});
  } else if (m == "isotonic") {
    j.update({{"x", f.isotonic.x}, {"y", f.isotonic.y}});
  } else if (m == "histogram") {
    j.update({{"bins", f.histogram.bins}, {"value", f.histogram.value}});
  } else if (m == "nw") {
    j.update({{"feature", "logit_confidence"},
              {"bandwidth", f.kernel_bandwidth},
              {"pseudo_count", f.options.pseudo_count},
              {"x", f.kernel_x},
              {"correct", f.kernel_correct}});
  } else if (m == "qats") {
    j.update({{"temperature_knots", f.qats.temperature},
              {"direction", f.qats.direction},
              {"calibration_confidence", f.qats.calib_confidence},
              {"converged", f.qats.converged},
              {"iterations", f.qats.iterations}});
  } else {
    j.update({{"w", f.linear.w},
              {"b", f.linear.b},
              {"converged", f.linear.converged},
              {"iterations", f.linear.iterations},
              {"l2", f.options.l2}});
  }
  return j;
}

FittedCalibrator calibrator_from_json(const nlohmann::json& j, const std::string& ctx) {
  if (!j.is_object()) throw_input(ctx, "is not a JSON object");
  const Reader r{j, ctx};
  const auto& schema = r.at("schema");
  if (schema != kCalibratorSchema)
    r.bad("schema", "is " + schema.dump() + ", but must be \"" + std::string(kCalibratorSchema) + "\"");
  const auto& method = r.at("method");
  const auto& methods = calibrator_methods();
  if (!method.is_string() || std::find(methods.begin(), methods.end(), method.get<std::string>()) == methods.end())
    r.bad("method", "is " + method.dump() +
                        ", but must be one of temperature, platt, isotonic, histogram, nw, qats, "
                        "vector, matrix");
  FittedCalibrator f;
  f.method = method.get<std::string>();
  f.classes = static_cast<std::size_t>(r.integer("classes", 2));
  if (f.classes > static_cast<std::size_t>(ranges::simulate_classes.hi))
    r.bad("classes", "is " + std::to_string(f.classes) + ", but must be in " + range_text(ranges::simulate_classes));
  f.n_fit = static_cast<std::size_t>(r.integer("n_calibration", 0));
  const std::string& m = f.method;
  auto finite = [&](const std::string& key, double v) {
    if (!std::isfinite(v)) r.bad(key, "is not finite");
    return v;
  };
  if (m == "temperature") {
    // beta = 1/T is what applies; both are written, so an edit of one alone is refused rather than
    // silently ignored (either may be given alone).
    const bool has_beta = j.contains("beta"), has_t = j.contains("temperature");
    if (!has_beta && !has_t) r.bad("beta", "is missing (give beta or temperature)");
    if (has_t) {
      const double t = finite("temperature", r.number("temperature"));
      if (!(t > 0)) r.bad("temperature", "is " + num(t) + ", but must be > 0");
      f.temperature.temperature = t;
    }
    if (has_beta) {
      f.temperature.beta = finite("beta", r.number("beta"));
      if (!(f.temperature.beta > 0)) r.bad("beta", "is " + num(f.temperature.beta) + ", but must be > 0");
    } else {
      f.temperature.beta = 1.0 / f.temperature.temperature;
    }
    if (has_t && has_beta && std::fabs(f.temperature.temperature * f.temperature.beta - 1.0) > 1e-9)
      r.bad("temperature", "is " + num(f.temperature.temperature) + ", but key 'beta' is " + num(f.temperature.beta) +
                               " and temperature must be 1/beta; change both or give only one");
    f.temperature.temperature = 1.0 / f.temperature.beta;
    f.temperature.converged = true;
  } else if (m == "platt") {
    f.platt.a = finite("a", r.number("a"));
    f.platt.b = finite("b", r.number("b"));
  } else if (m == "isotonic") {
    f.isotonic.x = r.finite_numbers("x");
    f.isotonic.y = r.numbers_in("y", 0.0, 1.0, f.isotonic.x.size());  // calibrated probabilities
    if (f.isotonic.x.empty()) r.bad("x", "is empty");
    for (std::size_t i = 1; i < f.isotonic.x.size(); ++i) {
      if (!(f.isotonic.x[i] > f.isotonic.x[i - 1]))
        r.bad("x", "must be strictly increasing (entry " + std::to_string(i) + ")");
      if (f.isotonic.y[i] < f.isotonic.y[i - 1]) r.bad("y", "must be non-decreasing (entry " + std::to_string(i) + ")");
    }
  } else if (m == "histogram") {
    const std::int64_t bins = r.integer("bins", 1);
    if (bins > ranges::calibrator_bins.hi)
      r.bad("bins", "is " + std::to_string(bins) + ", but must be in " + range_text(ranges::calibrator_bins));
    f.options.bins = static_cast<int>(bins);
    f.histogram.bins = f.options.bins;
    f.histogram.value = r.numbers_in("value", 0.0, 1.0, static_cast<std::size_t>(f.histogram.bins));
  } else if (m == "nw") {
    f.kernel_bandwidth = finite("bandwidth", r.number("bandwidth"));
    if (!(f.kernel_bandwidth > 0)) r.bad("bandwidth", "must be > 0");
    f.options.pseudo_count = finite("pseudo_count", r.number("pseudo_count"));
    if (!(f.options.pseudo_count >= 0)) r.bad("pseudo_count", "must be >= 0");
    f.kernel_x = r.finite_numbers("x");
    f.kernel_correct = r.numbers_in("correct", 0.0, 1.0, f.kernel_x.size());
    if (f.kernel_x.empty()) r.bad("x", "is empty");
  } else if (m == "qats") {
    f.qats.temperature = r.numbers("temperature_knots");
    if (f.qats.temperature.size() < 2) r.bad("temperature_knots", "needs at least 2 knots");
    if (f.qats.temperature.size() > static_cast<std::size_t>(ranges::calibrator_knots.hi))
      r.bad("temperature_knots", "has " + std::to_string(f.qats.temperature.size()) + " knots, but must have at most " +
                                     std::to_string(ranges::calibrator_knots.hi));
    for (double t : f.qats.temperature)
      if (!(t > 0) || !std::isfinite(t)) r.bad("temperature_knots", "must all be finite and > 0");
    f.options.knots = static_cast<int>(f.qats.temperature.size());
    const double dir = r.number("direction");
    if (dir != 1 && dir != -1) r.bad("direction", "must be 1 or -1");
    f.qats.direction = static_cast<int>(dir);
    for (std::size_t i = 1; i < f.qats.temperature.size(); ++i)
      if (f.qats.direction * (f.qats.temperature[i] - f.qats.temperature[i - 1]) < -1e-12)
        r.bad("temperature_knots", "must be monotone in the given direction");
    f.qats.calib_confidence = r.numbers_in("calibration_confidence", 0.0, 1.0);
    if (f.qats.calib_confidence.empty()) r.bad("calibration_confidence", "is empty");
    if (!std::is_sorted(f.qats.calib_confidence.begin(), f.qats.calib_confidence.end()))
      r.bad("calibration_confidence", "must be sorted");
    f.qats.converged = true;
  } else {
    const std::size_t K = f.classes;
    f.linear.diagonal = m == "vector";
    f.linear.k = K;
    f.linear.w = r.finite_numbers("w", f.linear.diagonal ? K : K * K);
    f.linear.b = r.finite_numbers("b", K);
    f.options.l2 = finite("l2", r.number("l2"));
    if (!(f.options.l2 >= 0)) r.bad("l2", "is " + num(f.options.l2) + ", but must be >= 0");
    f.linear.converged = true;
  }
  if (j.contains("converged")) {
    if (!j["converged"].is_boolean()) r.bad("converged", "is " + j["converged"].dump() + ", but must be true or false");
    f.temperature.converged = f.platt.converged = f.qats.converged = f.linear.converged = j["converged"].get<bool>();
  }
  if (j.contains("iterations")) {
    const std::int64_t iterations = r.integer("iterations", 0);
    if (iterations > INT_MAX)
      r.bad("iterations", "is " + std::to_string(iterations) + ", more than " + std::to_string(INT_MAX));
    const int it = static_cast<int>(iterations);
    f.temperature.iterations = f.platt.iterations = f.qats.iterations = f.linear.iterations = it;
  }
  return f;
}

}  // namespace arcal
