// Per-example routing traces (method.md §3) from a model over a data split: logits, labels,
// token-mean and CLS routing weights per point (zero-padded to the largest source count), and
// per-token entropy / depth mean / depth variance averaged over tokens. Output is an arcal::Trace.
#pragma once

#include <functional>
#include <string>

#include "io/trace.hpp"
#include "model/ar_vit.hpp"
#include "data/tensor_data.hpp"

namespace arcal {

/// Runs `model` (eval mode, no gradients) over `data` in batches and fills a Trace.
/// progress(done, total) is called after each batch when given.
Trace export_trace(ARViT& model, const TensorData& data, const std::string& meta_json, int batch_size = 500,
                   const std::function<void(std::int64_t, std::int64_t)>& progress = {},
                   const RoutingAblation* ablation = nullptr);

}  // namespace arcal
