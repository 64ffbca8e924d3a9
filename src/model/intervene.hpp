// Routing interventions (method.md §7): zero one source family's routing weight at chosen points
// (embedding = source 0, current = the most recent source, history = the sources in between),
// renormalise, rerun the split, and compare with the unablated model: Δ accuracy, Δ NLL and
// KL(p ‖ p_ablated) with paired bootstrap intervals, beside the family's mean routing mass.
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
  int batch_size = 500;
};

/// Runs every applicable intervention. progress(done, total) counts forward passes.
/// Throws InputError for a standard-residual model (no routing), an unknown family or a point out of range.
InterventionReport run_interventions(ARViT& model, const TensorData& data, const InterventionOptions& options,
                                     const std::function<void(int, int)>& progress = {});

}  // namespace arcal
