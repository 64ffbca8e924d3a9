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
  /// Row-major [N, K]. Exactly one of logits / probs / topk_logprobs is non-empty.
  std::vector<double> logits;
  std::vector<double> probs;
  /// The top-k output form (issue 53: a real vocabulary, K in the tens of thousands, where N x K floats
  /// would not fit): what the metrics and the audit read, per token. topk > 0 marks the form; classes is
  /// then the array `num_classes`.
  std::size_t topk = 0;                    ///< k (0: logits or probs hold the whole vector)
  std::vector<float> topk_logprobs;        ///< [N, k] the k largest log-probabilities, descending
  std::vector<std::int32_t> topk_indices;  ///< [N, k] their classes, distinct, in [0, K)
  std::vector<float> label_logprob;        ///< [N] log p at the label
  std::vector<float> log_normalizer;       ///< [N] logsumexp of the logits (top-k logits = logprobs + it)
  std::vector<float> predictive_entropy;   ///< [N] entropy of the whole softmax, nats
  std::vector<float> prob_sq_sum;          ///< [N] sum over all K classes of p_k^2 (the Brier score)
  std::vector<std::int64_t> labels;        ///< [N], in [0, K)
  /// Token-mean routing weights, row-major [N, P, S], zero past routing_sources[p]. May be empty.
  std::size_t points = 0;   ///< P
  std::size_t sources = 0;  ///< S (max sources over points)
  std::vector<float> routing;
  std::vector<float> routing_cls;  ///< same layout at the CLS token; may be empty
  /// Mixture of experts: the experts the model used, their top-k gate weights, 0 elsewhere ([N, P, S]
  /// like routing; optional). Read by the expert view of the audit (audit/experts.hpp), by no statistic.
  std::vector<float> routing_selected;
  std::vector<std::int32_t> routing_sources;  ///< [P]
  /// What the sources are: "depth" (ordered: the layers an AttnRes point reads, earliest first; the
  /// default) or "unordered" (a mixture-of-experts gate: expert indices carry no order, so no depth
  /// statistic applies). Array `routing_kind`, a 0-d string; written when not "depth".
  std::string routing_kind = "depth";
  /// Per-token routing statistics averaged over tokens, row-major [N, P] (method.md §3), written by
  /// `arcal trace`; optional (when absent they are computed from the token-mean weights instead).
  std::vector<float> routing_entropy;      ///< H_p in nats (not normalised)
  std::vector<float> routing_depth_mean;   ///< mu_p
  std::vector<float> routing_depth_var;    ///< sigma^2_p
  std::vector<double> features;            ///< row-major [N, F]; may be empty
  std::size_t num_features = 0;            ///< F
  std::vector<std::string> feature_names;  ///< [F]
  /// Cluster id of each example [N] (array `cluster`, int64/int32, >= 0; may be empty): examples that
  /// are not independent share one (the tokens of one sequence in a language model's token trace,
  /// method.md §6.9 "Dependent examples"), and every split, permutation and bootstrap of the audit keeps a cluster
  /// whole.
  std::vector<std::int64_t> cluster;
  std::string meta_json;  ///< JSON object as text ("{}" when absent)
  std::string path;       ///< where it was loaded from (for error messages)
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

/// Softmax probabilities [N, K] (from probs directly or softmax of logits, computed stably). A trace in
/// the top-k form holds no such vector: throws InputError naming `what` (the statistic or command that
/// needs it), the file, k and K.
std::vector<double> trace_probabilities(const Trace& trace, const std::string& what = "this statistic");

/// Per-example top-label quantities of either output form: the confidence (largest probability), whether
/// the top class is the label, -log p(label) (floored at 1e-300 like the metrics) and the Brier term
/// sum_k (p_k - 1[k = y])^2. Each vector [N].
struct TraceTopLabel {
  std::vector<double> confidence, correct, nll, brier;
  std::vector<std::int64_t> predicted;  ///< argmax (full form: lowest index on ties; top-k form: topk_indices[:, 0])
};
TraceTopLabel trace_top_label(const Trace& trace);

/// "the whole vector of K classes" or "the top-k of K classes (top-k form)": what a trace's outputs hold.
std::string trace_output_form(const Trace& trace);

}  // namespace arcal
