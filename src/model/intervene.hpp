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

namespace arcal {

/// Source indices of a family at a point with `sources` sources; empty when the family does not
/// exist there (current needs >= 2 sources, history >= 3). Throws InputError for an unknown family.
std::vector<int> family_sources(const std::string& family, int sources);

struct InterventionEffect {
  int point = -1;  ///< routing point, or -1 for "all points at once"
  std::string family;
  double mass = 0;  ///< mean routing weight of the family (over examples, tokens, and points for -1)
  std::int64_t n = 0;
  double delta_accuracy = 0, delta_nll = 0, mean_kl = 0;
  Interval delta_accuracy_ci, delta_nll_ci, mean_kl_ci;
};

struct InterventionReport {
  std::int64_t n = 0;
  double base_accuracy = 0, base_nll = 0;
  std::vector<InterventionEffect> effects;  ///< applicable (point, family) pairs, then all-points rows
  double spearman_mass_kl = 0;              ///< over the per-point rows
  double spearman_mass_nll = 0;
  std::size_t pairs = 0;
};

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
