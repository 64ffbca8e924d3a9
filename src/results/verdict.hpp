// The JSON of the audit's verdict (results.json `verdict`, schema arcal.audit/3): the answer, the
// sentence, the smallest effect of interest and every link of the decision chain it rests on
// (dependence, primary = the gain interval, beyond_outputs), the secondary family and the sensitivity
// at delta. The rule itself is audit/verdict.hpp (make_verdict); the report prints what is stored here.
#pragma once

#include <cmath>

#include <nlohmann/json.hpp>

#include "audit/verdict.hpp"
#include "results/json_fields.hpp"

namespace arcal {

inline void to_json(nlohmann::json& j, const VerdictEvidence& e) {
  j = {{"test", e.test},
       {"comparison", e.comparison},
       {"variant", e.variant},
       {"effect", results::number_or_null(e.effect)},
       {"effect_ci", results::interval_json(e.effect_ci)},
       {"p", results::number_or_null(e.p)},
       {"p_holm", results::number_or_null(e.p_holm)},
       {"runs", e.runs},
       {"status", e.status}};
}
inline void from_json(const nlohmann::json& j, VerdictEvidence& e) {
  results::get_to(j, "test", e.test);
  results::get_to(j, "comparison", e.comparison);
  results::get_to(j, "variant", e.variant);
  results::get_number(j, "effect", e.effect);
  results::get_interval(j, "effect_ci", e.effect_ci);
  results::get_number(j, "p", e.p);
  results::get_number(j, "p_holm", e.p_holm);
  results::get_to(j, "runs", e.runs);
  results::get_to(j, "status", e.status);
}
inline void to_json(nlohmann::json& j, const Verdict& v) {
  j = {{"answer", v.answer},
       {"summary", v.summary},
       {"alpha", v.alpha},
       {"smallest_effect", v.smallest_effect},
       {"dependence", v.dependence},
       {"primary", v.primary},
       {"beyond_outputs", v.beyond_outputs},
       {"secondary", v.secondary},
       {"sensitivity",
        {{"probe", "full_vector"},
         {"effect", results::number_or_null(v.sensitivity_effect)},
         {"recovery", results::number_or_null(v.recovery)},
         {"recovery_ci", results::interval_json(v.recovery_ci)},
         {"threshold", results::number_or_null(v.threshold)}}}};
  if (std::isfinite(v.class_recovery))
    j["sensitivity"]["one_class"] = {{"effect", results::number_or_null(v.class_effect)},
                                     {"recovery", results::number_or_null(v.class_recovery)},
                                     {"recovery_ci", results::interval_json(v.class_recovery_ci)}};
}
inline void from_json(const nlohmann::json& j, Verdict& v) {
  results::get_to(j, "answer", v.answer);
  results::get_to(j, "summary", v.summary);
  results::get_number(j, "alpha", v.alpha);
  results::get_number(j, "smallest_effect", v.smallest_effect);
  results::get_to(j, "dependence", v.dependence);
  results::get_to(j, "primary", v.primary);
  results::get_to(j, "beyond_outputs", v.beyond_outputs);
  v.secondary.clear();
  for (const auto& e : results::array_at(j, "secondary")) v.secondary.push_back(e.get<VerdictEvidence>());
  const auto& s = j.at("sensitivity");
  results::get_number(s, "effect", v.sensitivity_effect);
  results::get_number(s, "recovery", v.recovery);
  results::get_interval(s, "recovery_ci", v.recovery_ci);
  results::get_number(s, "threshold", v.threshold);
  if (s.contains("one_class")) {
    const auto& c = s.at("one_class");
    results::get_number(c, "effect", v.class_effect);
    results::get_number(c, "recovery", v.class_recovery);
    results::get_interval(c, "recovery_ci", v.class_recovery_ci);
  }
}

}  // namespace arcal
