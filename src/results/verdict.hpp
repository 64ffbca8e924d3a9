// The report's opening answer, stored in results.json as `verdict` (schema arcal.audit/2): does
// routing add calibration-relevant information beyond confidence in these runs? One or two sentences
// (`summary`) and the numbers they rest on: the strongest controlled evidence (the exact null's
// conditional permutation when it ran, else the across-run probe test, else the diagnostic family)
// with its p, the across-run confirmation, the test beyond the whole output vector, and the
// sensitivity bound that says whether "no" means "absent" or only "undetected". Computed once from
// the typed results (make_verdict); the report prints it and computes nothing.
#pragma once

#include <cstddef>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "results/json_fields.hpp"

namespace arcal {

struct AuditResults;

/// One piece of evidence: which test, on what, its effect and p (NaN when not run).
struct VerdictEvidence {
  std::string test;        ///< e.g. "exact_null.conditional_permutation", "probes.across_runs", "diagnostic"
  std::string comparison;  ///< e.g. "full_vector_vs_capacity_matched" (empty for the diagnostic)
  std::string variant;     ///< exact null: "confidence" or "full_logit"
  double effect = std::numeric_limits<double>::quiet_NaN();  ///< mean log-loss gain [nats] (positive: routing helps)
  Interval effect_ci{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  double p = std::numeric_limits<double>::quiet_NaN();
  std::size_t runs = 0;
};

struct Verdict {
  /// "present" (the decision test rejects with a positive gain), "weak" (it rejects, but the routing
  /// probe does not beat its capacity-matched control), "absent" (no rejection and the sensitivity audit would
  /// have seen the threshold effect), "undetected" (no rejection, the audit was underpowered) or
  /// "not assessed" (no rejection and no sensitivity audit).
  std::string answer;
  std::string summary;  ///< one or two sentences
  double alpha = 0.05;
  VerdictEvidence primary;         ///< the strongest controlled evidence run
  VerdictEvidence across_runs;     ///< probes: full vector vs capacity-matched, Hartung-Knapp over runs
  VerdictEvidence beyond_outputs;  ///< exact null full_logit variant (routing beyond the whole output vector)
  /// Sensitivity at threshold_effect for the full-vector probe (NaN when not run).
  double recovery = std::numeric_limits<double>::quiet_NaN();
  Interval recovery_ci{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  double threshold = std::numeric_limits<double>::quiet_NaN(), threshold_effect = std::numeric_limits<double>::quiet_NaN();
};

Verdict make_verdict(const AuditResults& results);

inline void to_json(nlohmann::json& j, const VerdictEvidence& e) {
  j = {{"test", e.test}, {"comparison", e.comparison}, {"variant", e.variant},
       {"effect", results::number_or_null(e.effect)}, {"effect_ci", results::interval_json(e.effect_ci)},
       {"p", results::number_or_null(e.p)}, {"runs", e.runs}};
}
inline void from_json(const nlohmann::json& j, VerdictEvidence& e) {
  results::get_to(j, "test", e.test);
  results::get_to(j, "comparison", e.comparison);
  results::get_to(j, "variant", e.variant);
  results::get_number(j, "effect", e.effect);
  results::get_interval(j, "effect_ci", e.effect_ci);
  results::get_number(j, "p", e.p);
  results::get_to(j, "runs", e.runs);
}
inline void to_json(nlohmann::json& j, const Verdict& v) {
  j = {{"answer", v.answer}, {"summary", v.summary}, {"alpha", v.alpha}, {"primary", v.primary},
       {"across_runs", v.across_runs}, {"beyond_outputs", v.beyond_outputs},
       {"sensitivity",
        {{"probe", "full_vector"}, {"recovery", results::number_or_null(v.recovery)},
         {"recovery_ci", results::interval_json(v.recovery_ci)}, {"threshold", results::number_or_null(v.threshold)},
         {"threshold_effect", results::number_or_null(v.threshold_effect)}}}};
}
inline void from_json(const nlohmann::json& j, Verdict& v) {
  results::get_to(j, "answer", v.answer);
  results::get_to(j, "summary", v.summary);
  results::get_number(j, "alpha", v.alpha);
  results::get_to(j, "primary", v.primary);
  results::get_to(j, "across_runs", v.across_runs);
  results::get_to(j, "beyond_outputs", v.beyond_outputs);
  const auto& s = j.at("sensitivity");
  results::get_number(s, "recovery", v.recovery);
  results::get_interval(s, "recovery_ci", v.recovery_ci);
  results::get_number(s, "threshold", v.threshold);
  results::get_number(s, "threshold_effect", v.threshold_effect);
}

}  // namespace arcal
