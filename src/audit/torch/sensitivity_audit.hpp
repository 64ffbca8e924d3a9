// The sensitivity (injection) audit and the exact-null audit of method.md §6.5-6.6: both replace the
// correctness labels by synthetic draws from a known truth and refit every probe of the probe audit
// (audit/torch/probes.hpp, through its ProbeDesign) on them. Sensitivity: truths p* = σ(logit q(c) +
// δ·tanh z) with the oracle gain fixed by bisection, recovery R per probe and effect. Exact null: truths
// that use the model outputs only, the null distribution of each probe's gain over its control and the
// Monte-Carlo p of the real gain. Result structs live in audit/sensitivity.hpp (std only).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <vector>

#include "audit/audit.hpp"
#include "audit/sensitivity.hpp"
#include "audit/torch/probes.hpp"

namespace arcal {

/// Training settings of the refits on synthetic labels (docs/method.md §6.7): one restart started
/// from the weights of a fit to the reference's soft labels (which carry no routing information), lr
/// 3e-3, batch 512, at most 100 epochs, patience 3.
MlpProbeOptions default_refit_mlp_options();

struct SensitivityAuditOptions {
  /// The probe design (seed, shuffle bins, `only`); probes.mlp is not used here.
  ProbeAuditOptions probes;
  MlpProbeOptions refit = default_refit_mlp_options();
  bool warm_start = true;  ///< start refits from the soft-reference fit (else seeded random init)
  std::vector<double> effects{0.002, 0.005, 0.010, 0.020};  ///< injected oracle gains, nats (0 allowed)
  int draws = 20;                   ///< synthetic label draws per run and effect
  std::size_t statistic = 0;        ///< index into AuditRunInput::statistics: the routing statistic z
  double threshold = 0.5;           ///< recovery needed at threshold_effect for "absent"
  double threshold_effect = 0.010;  ///< must be one of effects
  /// Ridge of the correction probe's cubic; negative (the default): chosen per fit by 5-fold CV on
  /// the calibration half over kCorrectionRidges (method.md §6.5: it must not shrink small effects by design).
  double correction_ridge = -1.0;
  int bootstrap_draws = 1000;
  /// Called after each run with (runs done, runs); for a progress bar (may be empty).
  std::function<void(std::size_t, std::size_t)> progress;
};

/// For every run: reference q per cross-fit fold, truths per effect, `draws` label draws, every probe
/// refitted (the design's probes plus "nw_2d", "correction" and "oracle"), log-loss on the other half,
/// recovery per probe and effect with a bootstrap over (run, draw) units, verdicts at the threshold.
/// Throws InputError on invalid runs (as validate_probe_inputs), an out-of-range statistic index, a
/// negative effect, draws < 1, or a threshold_effect not among the effects.
SensitivityResult run_sensitivity_audit(const std::vector<AuditRunInput>& runs, const SensitivityAuditOptions& options);

struct ExactNullAuditOptions {
  /// The probe design (seed, shuffle bins, `only`); probes.mlp trains the full-logit reference of the
  /// model-based null.
  ProbeAuditOptions probes;
  MlpProbeOptions refit = default_refit_mlp_options();
  bool warm_start = true;  ///< model-based null only (the permutation null always starts cold, see below)
  int replicates = 200;
  std::vector<std::string> variants{"confidence", "full_logit"};
  std::size_t group_size = 5;  ///< matched-group size of the conditional permutation null (2-10)
  bool model_based = true;     ///< also run the model-based null (§6.6 b), labelled as such
  /// Called after each (run, variant) with (done, total); for a progress bar (may be empty).
  std::function<void(std::size_t, std::size_t)> progress;
};

/// For every run and variant. Decision (§6.6 a): matched groups of 2-10 examples with nearly identical
/// outputs ("confidence": logit c; "full_logit": the leading principal components of the routing profile
/// as predicted from the sorted probabilities, a balancing score) inside each
/// cross-fit half; `replicates` permutations of the routing profile within the groups (every
/// profile-derived column, shuffled controls included, rebuilt from it), every probe that reads the
/// profile refitted on the real labels from the same seeded cold start as the real fit (a warm start
/// learnt from the real profile would break exchangeability), Monte-Carlo p of each comparison whose
/// probe or control reads the profile; pooled over runs by replicate index. Model-based (§6.6 b):
/// labels Y* ~ Bern(ĝ) with ĝ the 1-D NW q(c) or the full-logit MLP fitted on the calibration half,
/// with ĝ's held-out Hosmer-Lemeshow fit. Throws InputError on invalid runs, replicates < 1, an unknown
/// variant, a group size outside [2, 10], or "full_logit" without that probe in the design.
ExactNullResult run_exact_null_audit(const std::vector<AuditRunInput>& runs, const ExactNullAuditOptions& options);

}  // namespace arcal
