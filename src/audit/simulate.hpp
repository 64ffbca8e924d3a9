// Synthetic traces with a known routing effect (method.md §6.5), for checking the audit: realistic
// softmax confidences, a routing statistic z carried by the routing array (RE increases with z) and by
// a feature column, and correctness drawn from p* = σ(logit q(c) + δ·tanh(z)) with δ solved so that the
// oracle gain is the requested number of nats (δ = 0 is the exact null: routing carries nothing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/trace.hpp"

namespace arcal {

struct SimulationOptions {
  std::size_t n = 10000;
  std::size_t classes = 10;
  double effect_nats = 0.0;
  std::uint64_t seed = 0;
  std::size_t points = 6;      ///< routing points; point p has p + 2 sources
  double margin_mean = 4.0;    ///< logit margin of the predicted class ~ |N(mean, sd)|
  double margin_sd = 2.0;
  double logit_noise = 1.0;    ///< sd of the other logits
  double reference_slope = 1.0;  ///< q(c) = σ(slope · logit c): 1 is a calibrated model, < 1 overconfident
};

struct SimulatedTrace {
  Trace trace;  ///< logits [N,K], labels, routing [N,P,S], routing_sources, features [N,1] "routing_z", meta
  std::vector<double> confidence;          ///< [N] c
  std::vector<double> correct;             ///< [N] a in {0,1}, consistent with labels
  std::vector<double> z;                   ///< [N] standard-normal routing signal
  std::vector<double> routing_entropy;     ///< [N] RE (mean normalised entropy over points), increasing in z
  std::vector<double> predictive_entropy;  ///< [N] -Σ p log p
  std::vector<double> reference;           ///< [N] q(c)
  std::vector<double> truth;               ///< [N] p*
  double delta = 0.0;
};

/// Builds a synthetic trace. Every random draw comes from Rng(seed). Throws InputError when n < 2,
/// classes < 2, points < 1, or effect_nats is negative or unreachable.
SimulatedTrace simulate_trace(const SimulationOptions& options);

}  // namespace arcal
