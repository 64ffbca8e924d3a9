#include "audit/simulate.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
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
  if (!(o.effect_nats >= 0.0))
    throw_input(fn, "effect_nats is " + std::to_string(o.effect_nats) + ", but must be >= 0");
  if (o.effect_class < -1 || o.effect_class >= std::int64_t(o.classes))
    throw_input(fn, "effect_class is " + std::to_string(o.effect_class) +
                        ", but must be -1 (every class) or a class in [0, " + std::to_string(o.classes - 1) + "]");
  if (!(o.confound >= 0.0 && o.confound < 1.0))
    throw_input(fn, "confound is " + std::to_string(o.confound) + ", but must be in [0, 1)");
  if (o.confound_source != "confidence" && o.confound_source != "outputs" && o.confound_source != "class")
    throw_input(fn,
                "confound_source is '" + o.confound_source + "', but must be \"confidence\", \"outputs\" or \"class\"");
  const bool needs_u2 = (o.confound > 0.0 && o.confound_source == "outputs") || o.output_effect != 0.0;
  if (needs_u2 && o.classes < 3)
    throw_input(fn, "classes is " + std::to_string(o.classes) +
                        ", but confound_source \"outputs\" or an output_effect needs >= 3");
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
  for (std::size_t i = 0; i < n; ++i)  // the effect lives in ε (and, with effect_class, in one class)
    t[i] = o.effect_class < 0 || pred[i] == std::size_t(o.effect_class) ? std::tanh(sim.z_independent[i]) : 0.0;
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
                         {"effect_class", o.effect_class},
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

SimulatedTokens simulate_tokens(const TokenSimulationOptions& o) {
  const char* fn = "simulate_tokens";
  if (o.sequences < 2) throw_input(fn, "sequences is " + std::to_string(o.sequences) + ", but must be >= 2");
  if (o.length < 1) throw_input(fn, "length is 0, but must be >= 1");
  if (o.classes < 2) throw_input(fn, "classes is " + std::to_string(o.classes) + ", but must be >= 2");
  for (double v :
       {o.confidence_mean, o.confidence_cluster_sd, o.confidence_token_sd, o.routing_cluster_sd, o.correct_cluster_sd,
        o.slope, o.confound, o.effect, o.first_share, o.length_log_sd, o.zipf, o.class_effect, o.class_routing})
    if (!std::isfinite(v)) throw_input(fn, "every setting must be finite");
  if (o.confidence_cluster_sd < 0 || o.confidence_token_sd < 0 || o.routing_cluster_sd < 0 || o.correct_cluster_sd < 0)
    throw_input(fn, "standard deviations must be >= 0");
  if (!(std::abs(o.token_autocorrelation) < 1)) throw_input(fn, "token_autocorrelation must be in (-1, 1)");
  if (!(o.first_share >= 0 && o.first_share <= 0.95)) throw_input(fn, "first_share must be in [0, 0.95]");
  if (!(o.length_log_sd >= 0 && o.length_log_sd <= 3)) throw_input(fn, "length_log_sd must be in [0, 3]");
  if (o.zipf < 0) throw_input(fn, "zipf is " + std::to_string(o.zipf) + ", but must be >= 0");
  const std::size_t G = o.sequences, m = o.length, K = o.classes;
  Rng rng(o.seed);
  std::vector<std::size_t> len(G, m);
  if (o.length_log_sd > 0)
    for (std::size_t g = 1; g < G; ++g)
      len[g] =
          static_cast<std::size_t>(std::max(1.0, std::round(double(m) * std::exp(o.length_log_sd * rng.normal()))));
  std::size_t rest = 0;
  for (std::size_t g = 1; g < G; ++g) rest += len[g];
  if (o.first_share > 0)
    len[0] = std::max<std::size_t>(
        1, static_cast<std::size_t>(std::llround(o.first_share / (1 - o.first_share) * double(rest))));
  std::size_t N = 0;
  for (std::size_t l : len) N += l;
  SimulatedTokens out;
  std::vector<double> lc(N), e(N);
  out.cluster.resize(N);
  std::vector<double> v(G);
  const double floor_logit = std::log(1.0 / double(K - 1)) + 1e-6;  // c > 1/K: the top class must lead
  for (std::size_t g = 0, i = 0; g < G; ++g) {
    const double u = rng.normal(), w = rng.normal();
    v[g] = rng.normal();
    double ar = rng.normal();
    for (std::size_t t = 0; t < len[g]; ++t, ++i) {
      if (t > 0)
        ar = o.token_autocorrelation * ar +
             std::sqrt(1 - o.token_autocorrelation * o.token_autocorrelation) * rng.normal();
      e[i] = ar;
      lc[i] =
          std::max(floor_logit, o.confidence_mean + o.confidence_cluster_sd * u + o.confidence_token_sd * rng.normal());
      out.cluster[i] = static_cast<std::int64_t>(g);
      out.statistic.push_back(o.routing_cluster_sd * w + e[i]);  // the confound is added below
    }
  }
  // A vocabulary: the predicted classes first, from their own stream, so the draws above and below are
  // those of the uniform default.
  const bool vocabulary = o.zipf > 0 || o.class_effect != 0 || o.class_routing != 0;
  std::vector<std::int64_t> preds;
  std::vector<double> class_b;  // b_k of each token's class, and its standardised copy for s
  if (vocabulary) {
    Rng crng(derive_seed(o.seed, 0xC1A55));
    std::vector<std::size_t> order(K);
    std::iota(order.begin(), order.end(), std::size_t{0});
    crng.shuffle(order);  // rank r of the Zipf law is class order[r]
    std::vector<double> cdf(K);
    double acc = 0.0;
    for (std::size_t r = 0; r < K; ++r) cdf[r] = acc += std::pow(double(r + 1), -o.zipf);
    preds.resize(N);
    class_b.resize(N);
    for (std::size_t i = 0; i < N; ++i) {
      const double u = crng.uniform() * acc;
      const auto r =
          std::min<std::size_t>(K - 1, std::size_t(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin()));
      preds[i] = std::int64_t(order[r]);
      class_b[i] = class_offset(order[r], K);
    }
  }
  double bmean = 0, bvar = 0;
  for (double b : class_b) bmean += b / double(N);
  for (double b : class_b) bvar += (b - bmean) * (b - bmean) / double(N);
  const double bsd = std::sqrt(std::max(bvar, 1e-300));
  double mean = 0, var = 0;
  for (double x : lc) mean += x / double(N);
  for (double x : lc) var += (x - mean) * (x - mean) / double(N);
  const double sd = std::sqrt(std::max(var, 1e-300));
  Trace& tr = out.trace;
  tr.n = N;
  tr.classes = K;
  tr.logits.assign(N * K, 0.0);
  tr.labels.resize(N);
  for (std::size_t i = 0; i < N; ++i) {
    out.statistic[i] += o.confound * (lc[i] - mean) / sd;
    if (vocabulary) out.statistic[i] += o.class_routing * (class_b[i] - bmean) / bsd;
    const double c = 1.0 / (1.0 + std::exp(-lc[i]));
    double eta = o.slope * lc[i] + o.correct_cluster_sd * v[static_cast<std::size_t>(out.cluster[i])] + o.effect * e[i];
    if (vocabulary) eta += o.class_effect * class_b[i];
    const double a = rng.uniform() < 1.0 / (1.0 + std::exp(-eta)) ? 1.0 : 0.0;
    out.confidence.push_back(c);
    out.correct.push_back(a);
    // Logits: the predicted class leads by L with softmax top probability c: e^L / (e^L + K - 1) = c.
    const auto pred = vocabulary ? preds[i] : static_cast<std::int64_t>(rng.below(K));
    tr.logits[i * K + static_cast<std::size_t>(pred)] = std::log(c * double(K - 1) / (1.0 - c));
    auto other = static_cast<std::int64_t>(rng.below(K - 1));
    if (other >= pred) ++other;
    tr.labels[i] = a > 0 ? pred : other;
  }
  tr.features = out.statistic;
  tr.num_features = 1;
  tr.feature_names = {"routing_s"};
  tr.cluster = out.cluster;
  tr.meta_json =
      nlohmann::json{{"simulated", "tokens"},  {"sequences", G},     {"length", m},   {"first_share", o.first_share},
                     {"confound", o.confound}, {"effect", o.effect}, {"seed", o.seed}}
          .dump();
  return out;
}

}  // namespace arcal
