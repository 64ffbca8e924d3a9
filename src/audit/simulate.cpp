#include "audit/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "audit/injection.hpp"
#include "core/check.hpp"
#include "core/rng.hpp"

namespace arcal {

namespace {
/// b_k = 2k/(K − 1) − 1: the class-dependent calibration offset of predicted class k, in [−1, 1].
double class_offset(std::size_t k, std::size_t K) { return 2.0 * double(k) / double(K - 1) - 1.0; }
}  // namespace

SimulatedTrace simulate_trace(const SimulationOptions& o) {
  const char* fn = "simulate_trace";
  if (o.n < 2) throw_input(fn, "n is " + std::to_string(o.n) + ", but must be >= 2");
  if (o.classes < 2) throw_input(fn, "classes is " + std::to_string(o.classes) + ", but must be >= 2");
  if (o.points < 1) throw_input(fn, "points is 0, but must be >= 1");
  if (!(o.effect_nats >= 0.0)) throw_input(fn, "effect_nats is " + std::to_string(o.effect_nats) + ", but must be >= 0");
  if (!(o.confound >= 0.0 && o.confound < 1.0))
    throw_input(fn, "confound is " + std::to_string(o.confound) + ", but must be in [0, 1)");
  if (o.confound_source != "confidence" && o.confound_source != "outputs" && o.confound_source != "class")
    throw_input(fn, "confound_source is '" + o.confound_source + "', but must be \"confidence\", \"outputs\" or \"class\"");
  const bool needs_u2 = (o.confound > 0.0 && o.confound_source == "outputs") || o.output_effect != 0.0;
  if (needs_u2 && o.classes < 3)
    throw_input(fn, "classes is " + std::to_string(o.classes) + ", but confound_source \"outputs\" or an output_effect needs >= 3");
  for (double v : {o.wiggle, o.wiggle_frequency, o.output_effect, o.reference_slope, o.class_effect})
    if (!std::isfinite(v))
      throw_input(fn, "wiggle, wiggle_frequency, output_effect, reference_slope and class_effect must be finite");
  const std::size_t n = o.n, K = o.classes, P = o.points, S = P + 1;
  Rng rng(o.seed);
  SimulatedTrace sim;
  Trace& tr = sim.trace;
  tr.n = n;
  tr.classes = K;
  tr.logits.resize(n * K);
  sim.confidence.resize(n);
  sim.predictive_entropy.resize(n);
  sim.reference.resize(n);
  sim.z.resize(n);
  std::vector<std::size_t> pred(n);
  std::vector<double> prob(n * K);
  // Logits: noise plus a margin on one random class (the prediction); confidences range from ~1/K to ~1.
  for (std::size_t i = 0; i < n; ++i) {
    double* z = &tr.logits[i * K];
    for (std::size_t k = 0; k < K; ++k) z[k] = o.logit_noise * rng.normal();
    const std::size_t top = rng.below(K);
    z[top] += std::abs(o.margin_mean + o.margin_sd * rng.normal());
    const double mx = *std::max_element(z, z + K);
    double sum = 0.0;
    for (std::size_t k = 0; k < K; ++k) sum += (prob[i * K + k] = std::exp(z[k] - mx));
    double h = 0.0, c = 0.0;
    std::size_t arg = 0;
    for (std::size_t k = 0; k < K; ++k) {
      double& p = prob[i * K + k];
      p /= sum;
      if (p > 0) h -= p * std::log(p);
      if (p > c) {  // ties: lowest index
        c = p;
        arg = k;
      }
    }
    pred[i] = arg;
    sim.confidence[i] = c;
    sim.predictive_entropy[i] = h;
    const double cc = std::clamp(c, 1e-6, 1.0 - 1e-6);
    double l = o.reference_slope * std::log(cc / (1.0 - cc));
    if (o.wiggle != 0.0) l += o.wiggle * std::sin(o.wiggle_frequency * std::log(cc / (1.0 - cc)));
    l += o.class_effect * class_offset(arg, K);
    sim.reference[i] = std::clamp(1.0 / (1.0 + std::exp(-l)), 1e-9, 1.0 - 1e-9);
  }
  for (std::size_t i = 0; i < n; ++i) sim.z[i] = rng.normal();
  sim.z_independent = sim.z;
  if (needs_u2 || o.confound > 0.0) {
    // Output coordinates: u1 = standardised logit c, u2 = standardised log(p_(2) / p_(3)).
    std::vector<double> u1(n), u2(n, 0.0), top3(3);
    for (std::size_t i = 0; i < n; ++i) {
      const double cc = std::clamp(sim.confidence[i], 1e-6, 1.0 - 1e-6);
      u1[i] = std::log(cc / (1.0 - cc));
      if (K >= 3) {
        std::partial_sort_copy(prob.begin() + long(i * K), prob.begin() + long((i + 1) * K), top3.begin(), top3.end(),
                               std::greater<double>());
        u2[i] = std::log(std::max(top3[1], 1e-300)) - std::log(std::max(top3[2], 1e-300));
      }
    }
    auto standardise_in_place = [](std::vector<double>& v) {
      double m = 0, ss = 0;
      for (double x : v) m += x;
      m /= double(v.size());
      for (double x : v) ss += (x - m) * (x - m);
      const double sd = std::sqrt(ss / double(v.size()));
      for (double& x : v) x = sd > 0 ? (x - m) / sd : 0.0;
    };
    standardise_in_place(u1);
    standardise_in_place(u2);
    if (o.output_effect != 0.0)
      for (std::size_t i = 0; i < n; ++i) {
        const double r = sim.reference[i], l = std::log(r / (1.0 - r)) + o.output_effect * std::sin(2.0 * u2[i]);
        sim.reference[i] = std::clamp(1.0 / (1.0 + std::exp(-l)), 1e-9, 1.0 - 1e-9);
      }
    if (o.confound > 0.0) {
      std::vector<double> h(n);
      for (std::size_t i = 0; i < n; ++i)
        h[i] = o.confound_source == "confidence" ? u1[i]
               : o.confound_source == "class"    ? class_offset(pred[i], K)
                                                 : std::sin(2.0 * u2[i]) + u1[i];
      standardise_in_place(h);
      const double rho = o.confound, rest = std::sqrt(1.0 - rho * rho);
      for (std::size_t i = 0; i < n; ++i) sim.z[i] = rho * h[i] + rest * sim.z_independent[i];
    }
  }
  std::vector<double> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = std::tanh(sim.z_independent[i]);  // the effect lives in ε
  sim.delta = solve_injection_delta(sim.reference, t, o.effect_nats);
  sim.truth = injected_probability(sim.reference, t, sim.delta);
  // Correctness, then a label consistent with it: the prediction when correct, otherwise another class
  // drawn in proportion to its probability.
  sim.correct.resize(n);
  tr.labels.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const bool ok = rng.uniform() < sim.truth[i];
    sim.correct[i] = ok ? 1.0 : 0.0;
    if (ok) {
      tr.labels[i] = static_cast<std::int64_t>(pred[i]);
      continue;
    }
    double rest = 0.0;
    for (std::size_t k = 0; k < K; ++k)
      if (k != pred[i]) rest += prob[i * K + k];
    double u = rng.uniform() * rest;
    std::size_t pick = pred[i] == 0 ? 1 : 0;
    for (std::size_t k = 0; k < K; ++k) {
      if (k == pred[i]) continue;
      pick = k;
      u -= prob[i * K + k];
      if (u < 0) break;
    }
    tr.labels[i] = static_cast<std::int64_t>(pick);
  }
  // Routing: point p has S_p = p + 2 sources with weights softmax(τ·d_i), d_i = i/(S_p - 1) and
  // τ = 3 exp(-0.7 z) > 0; the entropy of softmax(τ d) falls as τ grows, so RE rises with z.
  tr.points = P;
  tr.sources = S;
  tr.routing.assign(n * P * S, 0.0f);
  tr.routing_sources.resize(P);
  for (std::size_t p = 0; p < P; ++p) tr.routing_sources[p] = static_cast<std::int32_t>(p + 2);
  sim.routing_entropy.resize(n);
  std::vector<double> w(S);
  for (std::size_t i = 0; i < n; ++i) {
    const double tau = 3.0 * std::exp(-0.7 * sim.z[i]);
    double re = 0.0;
    for (std::size_t p = 0; p < P; ++p) {
      const std::size_t sp = p + 2;
      double sum = 0.0;
      for (std::size_t s = 0; s < sp; ++s) sum += (w[s] = std::exp(tau * (static_cast<double>(s) / (sp - 1.0) - 1.0)));
      double h = 0.0;
      for (std::size_t s = 0; s < sp; ++s) {
        const double a = w[s] / sum;
        tr.routing[(i * P + p) * S + s] = static_cast<float>(a);
        if (a > 0) h -= a * std::log(a);
      }
      re += h / std::log(static_cast<double>(sp));
    }
    sim.routing_entropy[i] = re / static_cast<double>(P);
  }
  tr.num_features = 1;
  tr.feature_names = {"routing_z"};
  tr.features = sim.z;
  nlohmann::json meta = {{"generator", "arcal simulate"},
                         {"model", "synthetic"},
                         {"residual", "synthetic"},
                         {"dataset", "synthetic"},
                         {"n", n},
                         {"classes", K},
                         {"effect_nats", o.effect_nats},
                         {"confound", o.confound},
                         {"confound_source", o.confound_source},
                         {"reference_slope", o.reference_slope},
                         {"wiggle", o.wiggle},
                         {"wiggle_frequency", o.wiggle_frequency},
                         {"output_effect", o.output_effect},
                         {"class_effect", o.class_effect},
                         {"delta", sim.delta},
                         {"seed", o.seed},
                         {"version", ARCAL_VERSION}};
  tr.meta_json = meta.dump();
  return sim;
}

}  // namespace arcal
