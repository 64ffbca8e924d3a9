// CEDAR: coarse-to-fine error-aware attention routing (method.md §8), and the baselines on the same
// code path: dense (tiled online softmax), hard top-k (the B chunks with the highest summary score,
// the rest dropped) and summary-only (B = 0). Standard library only; every entry point takes raw
// float pointers and shapes, so the CLI, the model's attention hook (LibTorch) and a Python wrapper
// call the same code. Shapes: q [H, Nq, d], k and v [H, N, d], out [H, Nq, d], expanded [H, Nq].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace arcal::cedar {

enum class Method { cedar, topk, summary, dense };

std::string to_string(Method method);
/// Throws InputError for anything but "cedar", "topk", "summary" or "dense".
Method parse_method(const std::string& name);

/// Sizes of one attention call: H heads, Nq queries and N keys per head, head width d.
struct Shape {
  std::int64_t heads = 1, n_queries = 0, n_keys = 0, dim = 0;
};

/// Contiguous chunks of the N keys: chunk j is [starts[j], starts[j + 1]) with starts.back() = N.
struct ChunkLayout {
  std::vector<std::int64_t> bounds;  ///< [M + 1]: 0 = b_0 < b_1 < ... < b_M = N

  std::int64_t chunks() const { return bounds.empty() ? 0 : std::int64_t(bounds.size()) - 1; }
  std::int64_t n_keys() const { return bounds.empty() ? 0 : bounds.back(); }
  std::int64_t begin(std::int64_t j) const { return bounds[std::size_t(j)]; }
  std::int64_t end(std::int64_t j) const { return bounds[std::size_t(j) + 1]; }
  std::int64_t size(std::int64_t j) const { return end(j) - begin(j); }
  /// The chunk holding key position p (0 <= p < N).
  std::int64_t chunk_of(std::int64_t p) const;
};

/// Chunks of `chunk_size` keys (the last may be shorter). Throws InputError unless both are positive.
ChunkLayout fixed_chunks(std::int64_t n_keys, std::int64_t chunk_size);

/// Chunks starting at `starts` (0 first, strictly increasing, every start < n_keys). Throws
/// InputError naming `context`, the index and the violated constraint.
ChunkLayout chunks_from_starts(const std::vector<std::int64_t>& starts, std::int64_t n_keys,
                               const std::string& context = "chunk_starts");

/// Per-chunk statistics of one key/value set, computed once (summarize) and shared by every query.
/// Radii are Euclidean: key_rms_j = sqrt(mean_i |k_i - kbar_j|^2), key_max_j = max_i |k_i - kbar_j|,
/// the same for values. The error bound needs a ball around a reference point c that holds every
/// value a query can see: non-causal, c_h is the mean value of head h over all N keys (computed from
/// the float32 chunk means; any reference point is valid); causal, c is
/// chunk 0's mean value (visible to every query), so that no statistic of a later key enters a
/// query's expansion choice.
struct Summaries {
  std::int64_t heads = 0, dim = 0;
  ChunkLayout chunks;
  /// [H, M, 2d]: the mean key, then the per-coordinate key variance Var_j(k_c) (population, 1/n_j),
  /// so that the summary score is one 2d-long dot product with [q/sqrt(d), q*q/(2d)] (method.md §8).
  std::vector<float> key_row;
  std::vector<float> mean_value;                              ///< [H, M, d]
  std::vector<float> log_count;                               ///< [M] log n_j
  std::vector<float> key_rms, key_max, value_rms, value_max;  ///< [H, M]
  std::vector<float> value_offset;                            ///< [H, M] |vbar_j - c_h|
  std::vector<float> value_radius;   ///< [H] max_j (|vbar_j - c_h| + value_max_j) >= max_i |v_i - c_h|
  std::vector<float> causal_offset;  ///< [H, M] |vbar_j - vbar_0|
  std::vector<float> causal_radius;  ///< [H, M] max |v_i - vbar_0| over the keys of chunks 0..j
  std::vector<float> token_radius;   ///< [H, N] |v_i - vbar_0| (a causal query's own, partly visible chunk)

  std::size_t at(std::int64_t h, std::int64_t j) const { return std::size_t(h * chunks.chunks() + j); }
};

/// Chunk summaries of k and v ([H, N, d] each, float32, C order), in float64 then stored as float32.
/// Runs on `threads` workers (0 = the hardware's). Throws InputError when the layout does not cover N.
Summaries summarize(const float* k, const float* v, const Shape& shape, const ChunkLayout& chunks, int threads = 0);

struct Options {
  Method method = Method::cedar;
  /// Cap B on the chunks expanded to exact attention per query (cedar, topk); chunks that are always
  /// exact (sink chunks, the causal query's own chunk) are not counted.
  std::int64_t budget = 8;
  /// > 0 (cedar only): stop expanding once the remaining error bound is below
  /// error_target * |o_0|, o_0 the summary-only output (a variable budget, capped by `budget`).
  double error_target = 0.0;
  /// Queries are the last Nq positions of the N keys (query i at position N - Nq + i) and see keys
  /// at positions <= their own; their own chunk, the only partly visible one, is exact.
  bool causal = false;
  std::int64_t sink_chunks = 0;  ///< the first S chunks are always exact (all methods)
  int threads = 0;               ///< workers over heads x query tiles (0 = the hardware's)
  /// The second-order (variance) term of the summary score; false only for the ablation that shows
  /// why it is needed (without it every summary under-weights its chunk and expansion adds error).
  bool second_order = true;
};

/// What one call measured.
struct Stats {
  double mean_expanded = 0.0;  ///< mean over heads and queries of `expanded`
  std::int64_t max_expanded = 0;
  double summary_seconds = 0.0;  ///< building the chunk summaries (0 when they were given)
  double kernel_seconds = 0.0;   ///< the attention pass
};

/// Throws InputError naming `context`, the array ("q", "k", "v"), the element index [h, i, c] and
/// the constraint when a value is not finite, or when a dimension is not positive.
void check_inputs(const float* q, const float* k, const float* v, const Shape& shape, const std::string& context);

/// Throws InputError when the options do not fit the shape and layout (budget < 0, error_target < 0
/// or NaN, sink_chunks outside [0, M], causal with Nq > N, hard top-k that keeps no key).
void check_options(const Options& options, const Shape& shape, const ChunkLayout& chunks);

/// Attention of q over (k, v) by `options.method`. out [H, Nq, d] and expanded [H, Nq] are written
/// (expanded may be null): for cedar/topk the chunks expanded by the budget, for summary 0, for dense
/// every chunk the query sees. `summaries` must come from summarize() on the same k, v and layout
/// (it may be null for dense; for the other methods null means: build them here, timed in Stats).
/// Float32 data; scores, exponentials and block sums in float32, softmax normalisers and outputs
/// accumulated in float64 across blocks. Results do not depend on the thread count.
/// Throws InputError via check_options (the data are not scanned; call check_inputs for that).
Stats attention(const float* q, const float* k, const float* v, const Shape& shape, const ChunkLayout& chunks,
                const Options& options, float* out, std::int32_t* expanded, const Summaries* summaries = nullptr);

/// Relative error |a - b|_F / |b|_F over n floats (0 when both are 0).
double relative_error(const float* a, const float* b, std::size_t n);

}  // namespace arcal::cedar
