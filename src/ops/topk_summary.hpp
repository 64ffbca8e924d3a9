// Per-row summaries of the softmax over a vocabulary, read from float32 logits in two passes without
// forming the probabilities: the k largest log-probabilities with their classes, the log-normaliser,
// the entropy and the sum of squared probabilities. What the trace's top-k output form stores
// (docs/interface.md "The trace file"); the Python recorder calls it for float32 CPU logits
// (python/arcal/torch_hooks.py `_topk_summaries`, whose torch path is the reference in the tests).
#pragma once

#include <cstddef>
#include <cstdint>

namespace arcal {

/// Where the summaries of `rows` rows go: topk_logprobs and topk_indices [rows, k] (descending; equal
/// values in increasing class order), log_normalizer, entropy and prob_sq_sum [rows].
struct TopkSummaryOutput {
  float* topk_logprobs = nullptr;
  std::int64_t* topk_indices = nullptr;
  float* log_normalizer = nullptr;
  float* entropy = nullptr;
  float* prob_sq_sum = nullptr;
};

/// logits: float32 rows of `classes` values, row r at logits + r * row_stride; `row_index` (may be null:
/// rows 0 .. rows-1) names the rows to summarise, output row j from row_index[j]. Per row z:
/// m = max z, S = Σ e^{z−m}, log Z = m + log S, entropy = log S − Σ e^{z−m}(z−m) / S, Σp² = Σ e^{2(z−m)} / S²
/// (sums in double, e^x from core/fast_exp.hpp, relative error ~2e-7), the top k as z − log Z. A class at
/// −inf has p = 0; a row with a NaN gives NaN summaries and one with +inf (or only −inf) a non-finite
/// log-normaliser, for the caller to refuse. 1 <= k <= classes. Rows run on `threads` workers (0: all).
void softmax_topk_summaries(const float* logits, std::size_t classes, std::size_t row_stride,
                            const std::int64_t* row_index, std::size_t rows, std::size_t k,
                            const TopkSummaryOutput& out, int threads);

}  // namespace arcal
