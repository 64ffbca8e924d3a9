// Routing interventions (method.md §7): zero one source family's routing weight at chosen points
// (embedding = source 0, current = the most recent source, history = the sources in between),
// renormalise, rerun the split, and compare with the unablated model: Δ accuracy, Δ NLL and
// KL(p ‖ p_ablated) with paired bootstrap intervals, beside the family's mean routing mass; per
// point, per family over every point, and per family over the points feeding attention or MLP
// sublayers, with the mass-importance comparison of seed 002 per sublayer type. On a language
// model every next-token prediction is an example and the bootstrap resamples whole sequences.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/ar_vit.hpp"
#include "stats/bootstrap.hpp"
#include "data/tensor_data.hpp"
#include "results/intervene_json.hpp"

namespace arcal {

/// Source indices of a family at a point with `sources` sources; empty when the family does not
/// exist there (current needs >= 2 sources, history >= 3). Throws InputError for an unknown family.
std::vector<int> family_sources(const std::string& family, int sources);

struct InterventionOptions {
  std::vector<int> points;  ///< empty = every routing point
  std::vector<std::string> families = {"embedding", "current", "history"};
  int bootstrap = 1000;
  std::uint64_t seed = 0;
  int batch_size = 500;              ///< images per forward pass
  std::int64_t batch_tokens = 8192;  ///< language model: tokens per forward pass (whole sequences)
};

/// What routing point p feeds, for every point of a model: "attention" or "mlp" (the sublayer whose
/// input it is) or "final" (the final aggregation), stage by stage for Swin.
std::vector<std::string> point_sublayers(const ModelConfig& config);

/// Runs every applicable intervention. progress(done, total) counts forward passes. A text split
/// (data.text: sequences of T+1 bytes) runs the language model on the first T and scores the next
/// byte at every position.
/// Throws InputError for a standard-residual model (no routing), an unknown family or a point out of range.
InterventionReport run_interventions(ARViT& model, const TensorData& data, const InterventionOptions& options,
                                     const std::function<void(int, int)>& progress = {});

/// Seed 002's mass-importance comparison (method.md §7.1) from a report's rows: per sublayer type
/// (attention, mlp, all) that has all-points rows; `types` is point_sublayers() of the model.
std::vector<MassImportance> mass_importance(const InterventionReport& report, const std::vector<std::string>& types);

/// The routing-equivalent wrapper against its standard model (method.md §1) on the first `batch`
/// examples of `data` (images, or a language model's sequences): the largest relative logit
/// difference and the largest deviation of the wrapped routing from 1/S_p. Throws InputError when
/// `wrapped` is a standard-residual model or the two configurations differ beyond the residual mode.
WrapperCheck check_wrapper(ARViT& standard, ARViT& wrapped, const TensorData& data, std::int64_t batch);

}  // namespace arcal
