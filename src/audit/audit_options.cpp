#include "audit/audit_options.hpp"

#include <algorithm>
#include <cmath>

#include "core/check.hpp"

namespace arcal {

const OptionTable<FullAuditOptions>& audit_option_table() {
  using O = FullAuditOptions;
  namespace R = ranges;
  static const OptionTable<O> table = {
      {"stats", "--stat", "Statistics to audit: re, rdv or feature names, comma-separated", &O::stats},
      {"permutations", "--permutations", "Permutations R of the diagnostic's null", &O::permutations, R::permutations},
      {"seed", "--seed", "Seed of permutations, splits, shuffles and probes", &O::seed},
      {"bins", "--bins", "Confidence bins (15; sensitivity analysis: 10 with --equal-mass)", &O::bins, R::bins},
      {"equal_mass", "--equal-mass", "Equal-mass confidence bins (sensitivity analysis)", &O::equal_mass},
      {"alpha", "--alpha", "Test level of every verdict", &O::alpha, RealRange{1e-9, 0.999, false}},
      {"smallest_effect", "--smallest-effect",
       "Smallest effect of interest delta in nats of log-loss gain: the verdict calls a gain whose whole 95 % interval "
       "lies below delta negligible (0.005: half the seed papers' 0.010-nat reference effect)",
       &O::smallest_effect, RealRange{1e-6, 1.0, false}},
      {"drop_duplicates", "--drop-duplicates",
       "Remove rows that copy an earlier row of the same trace, exactly or within float noise (they are always counted "
       "and reported)",
       &O::drop_duplicates},
      {"condcal", "--condcal", "AR-CondCal (--no-condcal: diagnostic only)", &O::condcal, {}, {}, true},
      {"probes", "--probes", "MLP correctness probes and their controls", &O::probes, {}, {}, true},
      {"probe_restarts", "--probe-restarts", "Seeded restarts averaged per MLP probe and split", &O::probe_restarts,
       R::probe_restarts},
      {"probe_repeats", "--probe-repeats",
       "Repeated 2-fold cross-fits per run (the per-run test's variance includes the refits')", &O::probe_repeats,
       R::probe_repeats},
      {"sensitivity", "--sensitivity", "Sensitivity (injection) audit, method.md §6.5 (refits every probe)",
       &O::sensitivity},
      {"sensitivity_effects", "--sensitivity-effects", "Injected oracle gains in nats, comma-separated",
       &O::sensitivity_effects, RealRange{0.0, 10.0, false}},
      {"sensitivity_draws", "--sensitivity-draws", "Synthetic label draws per run and effect", &O::sensitivity_draws,
       R::sensitivity_draws},
      {"sensitivity_threshold", "--sensitivity-threshold", "Recovery R needed for the verdict \"absent\"",
       &O::sensitivity_threshold, R::sensitivity_threshold},
      {"sensitivity_threshold_effect", "--sensitivity-threshold-effect",
       "Effect (nats, one of --sensitivity-effects) at which the threshold applies", &O::sensitivity_threshold_effect,
       RealRange{0.0, 10.0, false}},
      {"correction_ridge", "--correction-ridge",
       "L2 penalty of the correction probe's cubic g(z); negative: chosen per fit by 5-fold inner CV",
       &O::correction_ridge, R::correction_ridge},
      {"exact_null", "--exact-null", "Exact-null audit, method.md §6.6 (refits every probe)", &O::exact_null},
      {"null_replicates", "--null-replicates", "Null replicates per run and variant", &O::null_replicates,
       R::null_replicates},
      {"null_variants",
       "--null-variants",
       "Exact-null references: confidence, full_logit (comma-separated)",
       &O::null_variants,
       {},
       {"confidence", "full_logit"}},
      {"null_group_size", "--null-group-size",
       "Matched-group size of the conditional permutation null (examples with nearly identical outputs)",
       &O::null_group_size, R::null_group_size},
      {"null_model_based",
       "--null-model-based",
       "Also run the model-based null (labels from a fitted reference; not the decision)",
       &O::null_model_based,
       {},
       {},
       true},
      {"null_sequential",
       "--null-sequential",
       "Sequential Monte Carlo (Besag-Clifford) for both exact nulls: each pooled comparison stops drawing replicates "
       "once its decision at --alpha is settled, and the probes only settled comparisons read are not refitted any "
       "more (the same decisions as the full count; --no-null-sequential: all replicates)",
       &O::null_sequential,
       {},
       {},
       true},
      {"refit_restarts", "--refit-restarts", "Restarts per MLP refit (sensitivity, exact null)", &O::refit_restarts,
       R::probe_restarts},
      {"refit_patience", "--refit-patience", "Early-stopping patience of the refits", &O::refit_patience,
       R::refit_patience},
      {"refit_cold", "--refit-cold",
       "Refits start from a seeded random initialisation instead of the soft-reference fit", &O::refit_cold},
      {"refit_subsample", "--refit-subsample",
       "Most examples per run the sensitivity audit and the exact null refit on: larger runs are cut to a seeded "
       "uniform subsample (valid, less power; 0 = every example)",
       &O::refit_subsample, R::refit_subsample},
      {"threads",
       "--threads",
       "Worker threads for the MLP fits, one fit per thread (0 = all cores); results do not depend on it",
       &O::threads,
       R::audit_threads,
       {},
       false,
       false},
  };
  return table;
}

void validate_audit_options(const FullAuditOptions& o, const std::string& where, bool by_key) {
  check_options(audit_option_table(), o, where, by_key);
  auto name = [&](const char* flag, const char* key) { return std::string(by_key ? key : flag); };
  if (o.stats.empty())
    throw_input(where, name("--stat", "stats") + " names no statistic, so the test family would be empty");
  for (const auto& st : o.stats)
    if (st.empty() || st.size() > 200 || st.find_first_of(", \t\n\r") != std::string::npos)
      throw_input(where, name("--stat", "stats") + " entries must be non-empty names without commas or blanks");
  if (o.null_variants.empty() && o.exact_null)
    throw_input(where, name("--null-variants", "null_variants") + " is empty");
  if (o.sensitivity && o.sensitivity_effects.empty())
    throw_input(where, name("--sensitivity-effects", "sensitivity_effects") + " is empty");
  if (o.sensitivity && std::none_of(o.sensitivity_effects.begin(), o.sensitivity_effects.end(),
                                    [&](double e) { return std::abs(e - o.sensitivity_threshold_effect) <= 1e-12; }))
    throw_input(where, name("--sensitivity-threshold-effect", "sensitivity_threshold_effect") + " " +
                           nlohmann::json(o.sensitivity_threshold_effect).dump() + " is not one of " +
                           name("--sensitivity-effects", "sensitivity_effects") + " " +
                           nlohmann::json(o.sensitivity_effects).dump());
}

}  // namespace arcal
