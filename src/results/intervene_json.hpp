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
  int point = -1;  ///< routing point, or -1 for "all points (of `sublayer`) at once"
  /// What the point's output feeds: "attention" or "mlp" (the sublayer it is the input of), "final"
  /// (the final aggregation); on the all-points rows "all", "attention" or "mlp" (the points ablated).
  std::string sublayer;
  std::string family;
  double mass = 0;  ///< mean routing weight of the family (over examples, tokens, and points for -1)
  std::int64_t n = 0;
  double delta_accuracy = 0, delta_nll = 0, mean_kl = 0;
  Interval delta_accuracy_ci, delta_nll_ci, mean_kl_ci;
};

/// The seed paper's mass-importance comparison within one sublayer type, from the all-points rows
/// of that type: the family with the largest mean routing mass against the family whose joint
/// ablation has the largest mean KL.
struct MassImportance {
  std::string sublayer;  ///< "attention", "mlp" or "all"
  std::string largest_mass_family, largest_effect_family;
  double largest_mass = 0, largest_effect_kl = 0;
  bool dissociated = false;  ///< the largest-effect family has less mass than the largest (ties are not)
  /// Families with mass >= 0.1 whose Delta NLL interval holds 0: mass without a detectable effect.
  std::vector<std::string> mass_without_effect;
  double spearman_mass_kl = 0;  ///< over this type's per-point rows (NaN when undefined)
  std::size_t pairs = 0;
  int points = 0, dissociated_points = 0;  ///< per point: the largest-KL family has less than the largest mass
};

struct InterventionReport {
  std::int64_t n = 0;          ///< examples: images, or next-token predictions of a language model
  std::string unit = "image";  ///< "image" or "token"
  std::int64_t clusters = 0;   ///< resampling units: images, or sequences (a token's cluster)
  double base_accuracy = 0, base_nll = 0;
  std::vector<InterventionEffect> effects;  ///< applicable (point, family) pairs, then all-points rows
  double spearman_mass_kl = 0;              ///< over the per-point rows
  double spearman_mass_nll = 0;
  std::size_t pairs = 0;
  std::vector<MassImportance> mass_importance;  ///< attention, mlp, all
};

/// For a standard-residual run loaded as AttnRes (--as-attnres): the wrapper against the standard
/// model on the first batch of the split (method.md §1).
struct WrapperCheck {
  double norm_eps = 0;               ///< the epsilon both models ran with
  double max_rel_logit_diff = 0;     ///< max |z_wrapped - z_standard| / max |z_standard|
  double max_routing_deviation = 0;  ///< max |alpha - 1/S_p| over every point, example and token
  std::int64_t examples = 0;         ///< images or tokens compared
};

/// The whole output: what was run and the report.
struct InterventionResults {
  std::string run, residual, split;
  std::string as_attnres;  ///< "" (the run as trained), "full" or "block"
  int bootstrap = 0;
  std::uint64_t seed = 0;
  InterventionReport report;
  bool has_wrapper_check = false;
  WrapperCheck wrapper_check;
};

inline constexpr double kLn2 = 0.69314718055994530942;

inline void to_json(nlohmann::json& j, const InterventionEffect& e) {
  j = {{"point", e.point == -1 ? nlohmann::json("all") : nlohmann::json(e.point)},
       {"sublayer", e.sublayer},
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
  e.sublayer = j.value("sublayer", std::string());  // absent in files written before the LM
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
inline void to_json(nlohmann::json& j, const MassImportance& m) {
  j = {{"sublayer", m.sublayer},
       {"largest_mass_family", m.largest_mass_family},
       {"largest_mass", m.largest_mass},
       {"largest_effect_family", m.largest_effect_family},
       {"largest_effect_kl", m.largest_effect_kl},
       {"dissociated", m.dissociated},
       {"mass_without_effect", m.mass_without_effect},
       {"spearman_mass_vs_kl", results::number_or_null(m.spearman_mass_kl)},
       {"pairs", m.pairs},
       {"points", m.points},
       {"dissociated_points", m.dissociated_points}};
}
inline void from_json(const nlohmann::json& j, MassImportance& m) {
  results::get_to(j, "sublayer", m.sublayer);
  results::get_to(j, "largest_mass_family", m.largest_mass_family);
  results::get_number(j, "largest_mass", m.largest_mass);
  results::get_to(j, "largest_effect_family", m.largest_effect_family);
  results::get_number(j, "largest_effect_kl", m.largest_effect_kl);
  results::get_to(j, "dissociated", m.dissociated);
  results::get_to(j, "mass_without_effect", m.mass_without_effect);
  results::get_number(j, "spearman_mass_vs_kl", m.spearman_mass_kl);
  results::get_to(j, "pairs", m.pairs);
  results::get_to(j, "points", m.points);
  results::get_to(j, "dissociated_points", m.dissociated_points);
}

inline void to_json(nlohmann::json& j, const InterventionResults& r) {
  j = {{"schema", kInterveneSchema},
       {"run", r.run},
       {"as_attnres", r.as_attnres},
       {"residual", r.residual},
       {"split", r.split},
       {"n", r.report.n},
       {"unit", r.report.unit},
       {"clusters", r.report.clusters},
       {"base_accuracy", r.report.base_accuracy},
       {"base_nll", r.report.base_nll},
       {"bootstrap", r.bootstrap},
       {"seed", r.seed},
       {"effects", r.report.effects},
       {"rank_correlation",
        {{"pairs", r.report.pairs},
         {"spearman_mass_vs_kl", results::number_or_null(r.report.spearman_mass_kl)},
         {"spearman_mass_vs_delta_nll", results::number_or_null(r.report.spearman_mass_nll)}}},
       {"mass_importance", r.report.mass_importance}};
  if (r.has_wrapper_check)
    j["wrapper_check"] = {{"norm_eps", r.wrapper_check.norm_eps},
                          {"max_rel_logit_diff", r.wrapper_check.max_rel_logit_diff},
                          {"max_routing_deviation", r.wrapper_check.max_routing_deviation},
                          {"examples", r.wrapper_check.examples}};
  if (r.report.unit == "token") {  // byte-level tokens: bits per byte = nats / ln 2
    j["base_bits_per_byte"] = r.report.base_nll / kLn2;
    for (auto& e : j["effects"]) {
      e["delta_bits_per_byte"] = e["delta_nll"].get<double>() / kLn2;
      if (e["delta_nll_ci"].is_array())
        e["delta_bits_per_byte_ci"] = {e["delta_nll_ci"][0].get<double>() / kLn2,
                                       e["delta_nll_ci"][1].get<double>() / kLn2};
      else
        e["delta_bits_per_byte_ci"] = nullptr;
    }
  }
}
inline void from_json(const nlohmann::json& j, InterventionResults& r) {
  results::get_to(j, "run", r.run);
  results::get_to(j, "as_attnres", r.as_attnres);
  results::get_to(j, "residual", r.residual);
  results::get_to(j, "split", r.split);
  results::get_to(j, "n", r.report.n);
  r.report.unit = j.value("unit", std::string("image"));
  r.report.clusters = j.contains("clusters") ? results::integer_value<std::int64_t>(j.at("clusters")) : r.report.n;
  results::get_number(j, "base_accuracy", r.report.base_accuracy);
  results::get_number(j, "base_nll", r.report.base_nll);
  results::get_to(j, "bootstrap", r.bootstrap);
  results::get_to(j, "seed", r.seed);
  results::get_to(j, "effects", r.report.effects);
  const auto& rc = j.at("rank_correlation");
  results::get_to(rc, "pairs", r.report.pairs);
  results::get_number(rc, "spearman_mass_vs_kl", r.report.spearman_mass_kl);
  results::get_number(rc, "spearman_mass_vs_delta_nll", r.report.spearman_mass_nll);
  if (j.contains("mass_importance")) results::get_to(j, "mass_importance", r.report.mass_importance);
  r.has_wrapper_check = j.contains("wrapper_check");
  if (r.has_wrapper_check) {
    const auto& w = j.at("wrapper_check");
    results::get_number(w, "norm_eps", r.wrapper_check.norm_eps);
    results::get_number(w, "max_rel_logit_diff", r.wrapper_check.max_rel_logit_diff);
    results::get_number(w, "max_routing_deviation", r.wrapper_check.max_routing_deviation);
    results::get_to(w, "examples", r.wrapper_check.examples);
  }
}

}  // namespace arcal
