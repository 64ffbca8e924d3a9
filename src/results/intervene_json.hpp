// The result of `arcal intervene` (routing ablations, model/intervene.hpp) as plain structs with the
// one to_json/from_json of "arcal.intervene/1" (docs/schema/intervene.schema.json). Standard library
// and nlohmann-json only, so the figures (report/figures.hpp) and tests read it without LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "results/json_fields.hpp"

namespace arcal {

inline constexpr const char* kInterveneSchema = "arcal.intervene/1";

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

/// The whole output: what was run and the report.
struct InterventionResults {
  std::string run, residual, split;
  std::string as_attnres;  ///< "" (the run as trained), "full" or "block"
  int bootstrap = 0;
  std::uint64_t seed = 0;
  InterventionReport report;
};

inline void to_json(nlohmann::json& j, const InterventionEffect& e) {
  j = {{"point", e.point == -1 ? nlohmann::json("all") : nlohmann::json(e.point)},
       {"family", e.family},
       {"mass", e.mass},
       {"n", e.n},
       {"delta_accuracy", e.delta_accuracy},
       {"delta_accuracy_ci", results::interval_json(e.delta_accuracy_ci)},
       {"delta_nll", e.delta_nll},
       {"delta_nll_ci", results::interval_json(e.delta_nll_ci)},
       {"mean_kl", e.mean_kl},
       {"mean_kl_ci", results::interval_json(e.mean_kl_ci)}};
}
inline void from_json(const nlohmann::json& j, InterventionEffect& e) {
  const auto& p = j.at("point");
  e.point = p.is_string() && p.get<std::string>() == "all" ? -1 : results::integer_value<int>(p);
  results::get_to(j, "family", e.family);
  results::get_number(j, "mass", e.mass);
  results::get_to(j, "n", e.n);
  results::get_number(j, "delta_accuracy", e.delta_accuracy);
  results::get_interval(j, "delta_accuracy_ci", e.delta_accuracy_ci);
  results::get_number(j, "delta_nll", e.delta_nll);
  results::get_interval(j, "delta_nll_ci", e.delta_nll_ci);
  results::get_number(j, "mean_kl", e.mean_kl);
  results::get_interval(j, "mean_kl_ci", e.mean_kl_ci);
}
inline void to_json(nlohmann::json& j, const InterventionResults& r) {
  j = {{"schema", kInterveneSchema},
       {"run", r.run},
       {"as_attnres", r.as_attnres},
       {"residual", r.residual},
       {"split", r.split},
       {"n", r.report.n},
       {"base_accuracy", r.report.base_accuracy},
       {"base_nll", r.report.base_nll},
       {"bootstrap", r.bootstrap},
       {"seed", r.seed},
       {"effects", r.report.effects},
       {"rank_correlation",
        {{"pairs", r.report.pairs},
         {"spearman_mass_vs_kl", results::number_or_null(r.report.spearman_mass_kl)},
         {"spearman_mass_vs_delta_nll", results::number_or_null(r.report.spearman_mass_nll)}}}};
}
inline void from_json(const nlohmann::json& j, InterventionResults& r) {
  results::get_to(j, "run", r.run);
  results::get_to(j, "as_attnres", r.as_attnres);
  results::get_to(j, "residual", r.residual);
  results::get_to(j, "split", r.split);
  results::get_to(j, "n", r.report.n);
  results::get_number(j, "base_accuracy", r.report.base_accuracy);
  results::get_number(j, "base_nll", r.report.base_nll);
  results::get_to(j, "bootstrap", r.bootstrap);
  results::get_to(j, "seed", r.seed);
  results::get_to(j, "effects", r.report.effects);
  const auto& rc = j.at("rank_correlation");
  results::get_to(rc, "pairs", r.report.pairs);
  results::get_number(rc, "spearman_mass_vs_kl", r.report.spearman_mass_kl);
  results::get_number(rc, "spearman_mass_vs_delta_nll", r.report.spearman_mass_nll);
}

}  // namespace arcal
