// Routing statistics of method.md §3 from a trace: normalised entropy per point, depth mean and
// variance, and the scalars RE and RDV, plus the entropy profile. The one function that the trace
// writer, the metrics and the audit all use.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "io/trace.hpp"

namespace arcal {

struct RoutingStats {
  std::size_t n = 0;
  std::size_t points = 0;
  std::vector<double> entropy;              ///< [N, P] H_p in nats
  std::vector<double> norm_entropy;         ///< [N, P] H_p / log S_p (0 when S_p = 1)
  std::vector<double> depth_mean;           ///< [N, P]
  std::vector<double> depth_var;            ///< [N, P]
  std::vector<double> re;                   ///< [N] mean_p normalised entropy
  std::vector<double> rdv;                  ///< [N] mean_p depth variance
  std::vector<std::size_t> profile_points;  ///< points with S_p > 1 (the profile's columns)
  bool per_token = false;        ///< entropy from the per-token statistics stored in the trace (routing_entropy)
  bool per_token_depth = false;  ///< depth mean and variance from routing_depth_mean / routing_depth_var
};

/// Throws InputError (naming trace.path) when the trace has no routing arrays.
RoutingStats routing_statistics(const Trace& trace);

/// Named per-example statistic: "re", "rdv", or a column of trace.features by name. "rdv" (depth
/// variance) needs ordered sources: a trace whose routing_kind is "unordered" offers "re" only.
/// Throws InputError listing the available names when `name` is unknown or does not apply.
std::vector<double> statistic_column(const Trace& trace, const std::string& name);

/// The statistics that apply to a trace, as audited when none are named: re and rdv for depth routing,
/// re for unordered (mixture-of-experts) routing, the trace's features by name when it has no routing,
/// and none for a trace of logits and labels only.
std::vector<std::string> default_statistics(const Trace& trace);

}  // namespace arcal
