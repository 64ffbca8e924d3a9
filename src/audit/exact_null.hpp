// The exact-null audit of method.md §6.6: does routing carry information about correctness beyond the
// model's outputs? The decision is a conditional permutation null (the routing profile permuted within
// matched groups of examples with nearly identical outputs, inside each predicted class for the
// full_logit variant, every profile-reading probe refitted on the real labels); beside it, labelled, a
// model-based null (labels drawn from a fitted reference). Result structs live in audit/sensitivity.hpp.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "audit/audit.hpp"
#include "audit/audit_options.hpp"
#include "audit/sensitivity.hpp"
#include "audit/probes.hpp"
#include "audit/sensitivity_audit.hpp"

namespace arcal {

struct ExactNullAuditOptions {
  /// The probe design (seed, shuffle bins, `only`); probes.mlp trains the full-logit reference of the
  /// model-based null.
  ProbeAuditOptions probes;
  /// The refits' training recipe (audit_pipeline.cpp derives it from `audit`'s refit_* and threads).
  MlpProbeOptions refit = default_refit_mlp_options();
  /// The audit's options, read here directly (issue 57: one field per option): null_replicates,
  /// null_variants, null_group_size (matched-group size of the conditional permutation null, 2-10),
  /// null_model_based (also the model-based null, §6.6 b, labelled as such), refit_cold (the
  /// model-based null's start; the permutation null always starts cold, see below) and alpha.
  /// null_sequential: sequential Monte Carlo for both nulls (Besag & Clifford 1991): replicates are
  /// drawn in batches of h = settling_count(alpha, null_replicates) per run; a pooled comparison stops
  /// once it has h null means at or above its real mean (its p is then sequential_p), later batches
  /// refit only the probes the open comparisons read, and a variant stops when every comparison has.
  /// The decision at alpha (or any smaller level) is that of the fixed-count test.
  FullAuditOptions audit;
  /// Called after each (run, variant) with (done, total); for a progress bar (may be empty).
  std::function<void(std::size_t, std::size_t)> progress;
};

/// For every run and variant. Decision (§6.6 a): matched groups of 2-10 examples with nearly identical
/// outputs ("confidence": logit c; "full_logit": the leading principal components of the routing profile
/// as predicted from the sorted log-probabilities, a balancing score, and logit P(correct | outputs),
/// inside each predicted class) inside each cross-fit half; `replicates` permutations of the routing profile within the
/// groups (every profile-derived column, shuffled controls included, rebuilt from it), every probe that reads the
/// profile refitted on the real labels from the same seeded cold start as the real fit (a warm start
/// learnt from the real profile would break exchangeability), Monte-Carlo p of each comparison whose
/// probe or control reads the profile; pooled over runs by replicate index. Model-based (§6.6 b):
/// labels Y* ~ Bern(ĝ) with ĝ the 1-D NW q(c) or the full-logit MLP fitted on the calibration half,
/// with ĝ's held-out Hosmer-Lemeshow fit. Throws InputError on invalid runs, replicates < 1, an unknown
/// variant, a group size outside [2, 10], or "full_logit" without that probe in the design.
ExactNullResult run_exact_null_audit(const std::vector<AuditRunInput>& runs, const ExactNullAuditOptions& options);

}  // namespace arcal
