// The LibTorch edge of the CEDAR kernel: attention on tensors, and the model's eval-mode attention
// backend (model/layers.hpp) that runs CEDAR, hard top-k, summary-only or dense in every layer.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <utility>

#include "cedar/cedar.hpp"
#include "model/layers.hpp"

namespace arcal::cedar {

/// CEDAR attention of q (..., Nq, d) over k, v (..., N, d), any matching leading dimensions (flattened
/// into heads), on the CPU: inputs are made contiguous float32 (copies only where needed). Returns out
/// (..., Nq, d) in q's dtype and expanded (..., Nq) int32; `stats` (optional) receives the call's Stats.
std::pair<torch::Tensor, torch::Tensor> attention_tensors(const torch::Tensor& q, const torch::Tensor& k,
                                                          const torch::Tensor& v, const ChunkLayout& chunks,
                                                          const Options& options, Stats* stats = nullptr);

/// Running totals of a backend's calls (summed over layers, heads and queries).
struct ExpansionTally {
  double expanded = 0;  ///< sum of `expanded` over every (layer, image, head, query)
  double queries = 0;   ///< number of such (layer, image, head, query)
  double seconds = 0;   ///< kernel_seconds + summary_seconds
  double mean() const { return queries > 0 ? expanded / queries : 0.0; }
};

/// A model AttentionBackend running `options` over `chunks` (which must cover the model's tokens) in
/// every attention layer; adds each call to *tally when given. In a causal layer (the language
/// model) the call runs as causal prefill: every token is a query that sees keys up to its own
/// position, its own chunk exact (options.causal is set for that call).
AttentionBackend make_backend(ChunkLayout chunks, Options options, std::shared_ptr<ExpansionTally> tally = {});

/// The same with chunks of `chunk_size` tokens laid over whatever length each call has (the last
/// chunk may be shorter): the language model's prefill at any context.
AttentionBackend make_backend_fixed(std::int64_t chunk_size, Options options,
                                    std::shared_ptr<ExpansionTally> tally = {});

}  // namespace arcal::cedar
