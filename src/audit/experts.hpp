// The expert view of a mixture-of-experts trace (issue 53, item 4): per routing point (one router per
// layer) the experts' load (the share of tokens each one handled, from the experts the model selected,
// and the mean router probability), the router's entropy, and the calibration of the tokens each expert
// handled (accuracy, mean confidence, ECE) with cluster-bootstrap intervals (documents resampled
// whole). A view, not a test: the audit's tests read the router distribution's entropy (method.md §3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stats/bootstrap.hpp"

namespace arcal {

struct Trace;

struct ExpertRow {
  std::size_t tokens = 0;  ///< tokens this expert handled
  double load = 0;         ///< tokens handled / all tokens (sums to the experts per token over a layer)
  double router_mean = 0;  ///< mean router probability (sums to 1 over a layer)
  double accuracy = 0, mean_confidence = 0, ece = 0;  ///< of the tokens it handled (NaN when none)
  /// accuracy - mean confidence: < 0 where the expert's tokens are over-confident. Unlike the ECE (biased
  /// upward, more so in an expert's smaller share), its bootstrap interval is centred on the truth.
  double gap = 0;
  Interval accuracy_ci{}, ece_ci{}, gap_ci{};  ///< cluster-bootstrap percentile intervals (NaN: none)
};

struct ExpertLayer {
  std::string name;              ///< the routing point (module path from the trace's meta, else "point p")
  std::size_t experts = 0;       ///< routing_sources[p]
  double experts_per_token = 0;  ///< mean number of experts a token was sent to
  double router_entropy = 0;     ///< mean over tokens of H(router distribution) / log(experts)
  Interval router_entropy_ci{};  ///< its cluster-bootstrap interval
  std::vector<ExpertRow> rows;   ///< [experts]
};

struct ExpertView {
  std::size_t n = 0;         ///< tokens
  std::size_t clusters = 0;  ///< units the bootstrap resampled (documents; n when the trace has none)
  int bins = 15, draws = 0;
  std::uint64_t seed = 0;
  double level = 0.95;
  /// Which tokens an expert "handled": "selected" (routing_selected > 0: the experts the model used) or
  /// "argmax" (the trace has no routing_selected: the router's most probable expert).
  std::string handled;
  std::vector<ExpertLayer> layers;
};

/// The expert view of an unordered-routing trace (routing_kind "unordered"); draws cluster-bootstrap
/// resamples (0: no intervals) seeded by `seed`. Throws InputError when the trace has no routing or its
/// routing is depth routing.
ExpertView expert_view(const Trace& trace, int bins = 15, int draws = 200, std::uint64_t seed = 0, double level = 0.95);

}  // namespace arcal
