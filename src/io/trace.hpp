// The trace: one run's per-example predictions and routing, as stored in a .npz trace file
// (schema in docs/interface.md). Loading validates every array; the audit and the metrics read
// only this struct, so traces from any model or framework are valid input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/npz.hpp"

namespace arcal {

struct NpyArray;

struct Trace {
  std::size_t n = 0;        ///< examples
  std::size_t classes = 0;  ///< K
  /// Row-major [N, K]. Exactly one of logits / probs is non-empty.
  std::vector<double> logits;
  std::vector<double> probs;
  std::vector<std::int64_t> labels;  ///< [N], in [0, K)
  /// Token-mean routing weights, row-major [N, P, S], zero past routing_sources[p]. May be empty.
  std::size_t points = 0;   ///< P
  std::size_t sources = 0;  ///< S (max sources over points)
  std::vector<float> routing;
  std::vector<float> routing_cls;      ///< same layout at the CLS token; may be empty
  std::vector<std::int32_t> routing_sources;  ///< [P]
  /// What the sources are: "depth" (ordered: the layers an AttnRes point reads, earliest first; the
  /// default) or "unordered" (a mixture-of-experts gate: expert indices carry no order, so no depth
  /// statistic applies). Array `routing_kind`, a 0-d string; written when not "depth".
  std::string routing_kind = "depth";
  /// Per-token routing statistics averaged over tokens, row-major [N, P] (method.md §3), written by
  /// `arcal trace`; optional (when absent they are computed from the token-mean weights instead).
  std::vector<float> routing_entropy;     ///< H_p in nats (not normalised)
  std::vector<float> routing_depth_mean;  ///< mu_p
  std::vector<float> routing_depth_var;   ///< sigma^2_p
  std::vector<double> features;        ///< row-major [N, F]; may be empty
  std::size_t num_features = 0;        ///< F
  std::vector<std::string> feature_names;  ///< [F]
  /// Cluster id of each example [N] (array `cluster`, int64/int32, >= 0; may be empty): examples that
  /// are not independent share one (the tokens of one sequence in a language model's token trace,
  /// method.md §6.8), and every split, permutation and bootstrap of the audit keeps a cluster whole.
  std::vector<std::int64_t> cluster;
  std::string meta_json;               ///< JSON object as text ("{}" when absent)
  std::string path;                    ///< where it was loaded from (for error messages)
};

/// Reads and validates a trace file. Throws InputError naming the file, array, index and constraint.
Trace load_trace(const std::string& path);

/// The trace held by arrays already in memory (what read_npz returns; the Python module builds them
/// from numpy arrays): the checks and messages of load_trace, with `path` naming the source and `fn`
/// opening every message ("fn: path: ..."). Arrays that are not trace arrays are ignored.
Trace trace_from_arrays(const std::vector<NpyArray>& arrays, const std::string& path,
                        const std::string& fn = "load_trace");

/// Writes a trace file atomically (np.savez-compatible, uncompressed unless compress is true).
void save_trace(const Trace& trace, const std::string& path, bool compress = true);

/// Validates shapes, label range, finiteness and routing normalisation (rows sum to 1 within 1e-4
/// over valid sources). Throws InputError naming trace.path, the array, the index and the constraint.
void validate_trace(const Trace& trace);

/// Softmax probabilities [N, K] (from probs directly or softmax of logits, computed stably).
std::vector<double> trace_probabilities(const Trace& trace);

}  // namespace arcal
