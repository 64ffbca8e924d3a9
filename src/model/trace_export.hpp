// Per-example routing traces (method.md §3) from a model over a data split: logits, labels,
// token-mean and CLS routing weights per point (zero-padded to the largest source count), and
// per-token entropy / depth mean / depth variance averaged over tokens. Output is an arcal::Trace.
// For a language model on a text split the trace is per token: every next-token prediction is an
// example (the full K = 256 logit vector, the next byte as label, the token's own routing weights
// and statistics) with its sequence as the cluster id (method.md §6.9 "Dependent examples").
#pragma once

#include <functional>
#include <string>

#include "io/trace.hpp"
#include "model/ar_vit.hpp"
#include "data/tensor_data.hpp"

namespace arcal {

/// Runs `model` (eval mode, no gradients) over `data` in batches and fills a Trace.
/// progress(done, total) is called after each batch when given (in sequences for a text split).
/// A text split gives the token trace: rows s * T + t, cluster s.
Trace export_trace(ARViT& model, const TensorData& data, const std::string& meta_json, int batch_size = 500,
                   const std::function<void(std::int64_t, std::int64_t)>& progress = {},
                   const RoutingAblation* ablation = nullptr);

/// `count` sequences of a text split, evenly spaced (sequence floor(j n / count) for j < count), so
/// that neighbouring sequences, which may share a document, are rarely both taken; count <= 0 or
/// >= n keeps them all. Throws InputError for an image split.
TensorData select_sequences(const TensorData& data, std::int64_t count);

}  // namespace arcal
