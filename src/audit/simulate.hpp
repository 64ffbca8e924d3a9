// Synthetic traces with a known routing effect (method.md §6.5), for checking the audit: realistic
// softmax confidences, a routing statistic z carried by the routing array (RE increases with z) and by
// a feature column, and correctness drawn from p* = σ(logit q(c) + δ·tanh(z)) with δ solved so that the
// oracle gain is the requested number of nats (δ = 0 is the exact null: routing carries nothing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/trace.hpp"

namespace arcal {

struct SimulationOptions {
  std::size_t n = 10000;
  std::size_t classes = 10;
  double effect_nats = 0.0;
  /// >= 0: the effect acts only on examples predicted as this class (t = 0 elsewhere; δ is solved so
  /// that the mean gain over all examples is still effect_nats): a class-specific routing effect
  /// (issue 54). -1: every class.
  std::int64_t effect_class = -1;
  std::uint64_t seed = 0;
  std::size_t points = 6;    ///< routing points; point p has p + 2 sources
  double margin_mean = 4.0;  ///< logit margin of the predicted class ~ |N(mean, sd)|
  double margin_sd = 2.0;
  double logit_noise = 1.0;      ///< sd of the other logits
  double reference_slope = 1.0;  ///< q(c) = σ(slope · logit c): 1 is a calibrated model, < 1 overconfident
  // ---- null families that trip naive tests (method.md §6.1, §6.6); all 0 reproduce the plain simulator.
  /// Correlation of the routing signal with the outputs: z = ρ·h + sqrt(1 − ρ²)·ε, h a standardised
  /// function of the outputs (confound_source), ε the independent part. The effect is planted in ε
  /// only, so with ρ > 0 and δ = 0 routing carries nothing beyond the outputs but still tracks them.
  double confound = 0.0;
  /// "confidence": h = standardised logit c (s = h(c) + noise); "outputs": h = standardised
  /// sin(2·u2) + u1, a nonlinear function of the sorted probabilities (u1 = standardised logit c,
  /// u2 = standardised log(p_(2) / p_(3))).
  /// "class": h = standardised b_ŷ, the predicted class's calibration offset below (routing tracks the
  /// predicted class).
  std::string confound_source = "confidence";
  /// Class-dependent calibration: logit q += class_effect · b_ŷ with b_k = 2k/(K − 1) − 1 for the predicted
  /// class ŷ (some classes are harder). Information beyond c, not beyond the outputs.
  double class_effect = 0.0;
  /// Reference outside simple families: logit q += wiggle · sin(wiggle_frequency · logit c) (a
  /// calibration curve that a smooth or monotone fit of c misses) + output_effect · sin(2·u2) (a
  /// dependence on the outputs beyond c).
  double wiggle = 0.0;
  double wiggle_frequency = 3.0;
  double output_effect = 0.0;
};

struct SimulatedTrace {
  Trace trace;  ///< logits [N,K], labels, routing [N,P,S], routing_sources, features [N,1] "routing_z", meta
  std::vector<double> confidence;          ///< [N] c
  std::vector<double> correct;             ///< [N] a in {0,1}, consistent with labels
  std::vector<double> z;                   ///< [N] routing signal (standard normal; = ε when confound is 0)
  std::vector<double> z_independent;       ///< [N] ε, the part of z independent of the outputs (carries the effect)
  std::vector<double> routing_entropy;     ///< [N] RE (mean normalised entropy over points), increasing in z
  std::vector<double> predictive_entropy;  ///< [N] -Σ p log p
  std::vector<double> reference;           ///< [N] q(c)
  std::vector<double> truth;               ///< [N] p*
  double delta = 0.0;
};

/// Simulated token data with strong within-sequence dependence (method.md §6.9 "Dependent examples", issue 27):
/// `sequences` clusters of `length` tokens. Per sequence g: u_g, v_g, w_g ~ N(0, 1); per token an AR(1) series e_t =
/// phi e_{t-1} + sqrt(1 - phi^2) eta_t (phi = token_autocorrelation) and d_t ~ N(0, 1). Confidence: logit c =
/// confidence_mean + confidence_cluster_sd u_g + confidence_token_sd d_t (c = sigma of it, kept above 1/K). Routing
/// statistic: s = confound z(c) + routing_cluster_sd w_g + e_t, z the standardised logit c. Correctness: a ~
/// Bern(sigma(slope logit c + correct_cluster_sd v_g + effect e_t)). With effect 0 routing carries nothing about a
/// beyond c (w, e independent of v), yet both s and a are correlated inside a sequence; effect != 0 plants a dependence
/// on the token-level part of s that c does not carry. Unequal sequences (issue 54): with first_share > 0 sequence 0
/// holds that share of the tokens (one dominant document) and the others keep `length`; with length_log_sd > 0 the
/// other sequences' lengths are max(1, round(length e^{x})), x ~ N(0, length_log_sd^2) (drawn before anything else).
struct TokenSimulationOptions {
  std::size_t sequences = 200, length = 64;
  double first_share = 0.0;    ///< [0, 0.95]: the share of all tokens in sequence 0 (0: like the others)
  double length_log_sd = 0.0;  ///< >= 0: spread of the other sequences' lengths on the log scale
  std::size_t classes = 256;
  double confidence_mean = 0.5, confidence_cluster_sd = 0.8, confidence_token_sd = 1.2;
  double routing_cluster_sd = 1.0, token_autocorrelation = 0.6;
  double correct_cluster_sd = 1.0;
  double slope = 1.0;     ///< < 1: over-confident (the confounded family uses 0.6)
  double confound = 0.0;  ///< s tracks c inside a sequence too
  double effect = 0.0;    ///< logit of a per unit of e (the planted effect)
  /// A vocabulary (issue 53). With any of the three set, the predicted classes are drawn up front from their
  /// own stream (derive_seed(seed, 0xC1A55)), Zipf(zipf) over the classes in a seeded random order (zipf 0:
  /// uniform); class_effect adds class_effect b_k to the logit of a (b_k = 2k/(K − 1) − 1 of the predicted
  /// class k: calibration differs by class) and class_routing adds class_routing times the standardised
  /// b_k to s (routing tracks the class). All three 0: the draws of before, token for token.
  double zipf = 0.0, class_effect = 0.0, class_routing = 0.0;
  std::uint64_t seed = 0;
};

struct SimulatedTokens {
  std::vector<double> confidence, correct, statistic;
  std::vector<std::int64_t> cluster;  ///< the sequence of each token, 0..sequences-1
  /// A trace of the same tokens: logits [N, K] whose top probability is c (the predicted class drawn
  /// uniformly), labels consistent with a, features [N, 1] "routing_s" = s, cluster, meta.
  Trace trace;
};

/// Builds it from Rng(seed). Throws InputError for sequences < 2, length < 1, classes < 2, or a
/// non-finite or out-of-range (|phi| >= 1, sds < 0, zipf < 0) setting.
SimulatedTokens simulate_tokens(const TokenSimulationOptions& options);

/// Builds a synthetic trace. Every random draw comes from Rng(seed). Throws InputError when n < 2,
/// classes < 2 (3 with confound_source "outputs" or an output_effect), points < 1, effect_nats is
/// negative or unreachable, confound is outside [0, 1), or confound_source is unknown ("confidence",
/// "outputs", "class").
SimulatedTrace simulate_trace(const SimulationOptions& options);

}  // namespace arcal
