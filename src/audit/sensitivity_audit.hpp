// The sensitivity (injection) audit of method.md §6.5: it replaces the correctness labels by synthetic
// draws from a known truth p* = σ(logit q(c) + δ·tanh z), the oracle gain fixed by bisection, and refits
// every probe of the probe audit (audit/probes.hpp, through its ProbeDesign) on them: recovery R
// per probe and effect. The exact-null audit (§6.6) is audit/exact_null.hpp. Result structs live in
// audit/sensitivity.hpp (std only).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <vector>

#include "audit/audit.hpp"
#include "audit/audit_options.hpp"
#include "audit/sensitivity.hpp"
#include "audit/probes.hpp"

namespace arcal {

/// Training settings of the refits on synthetic labels (docs/method.md §6.7): one restart started
/// from the weights of a fit to the reference's soft labels (which carry no routing information), lr
/// 3e-3, batch 512, at most 100 epochs, patience 3.
MlpProbeOptions default_refit_mlp_options();

struct SensitivityAuditOptions {
  /// The probe design (seed, shuffle bins, `only`); probes.mlp is not used here.
  ProbeAuditOptions probes;
  /// The refits' training recipe (audit_pipeline.cpp derives it from `audit`'s refit_* and threads).
  MlpProbeOptions refit = default_refit_mlp_options();
  /// The audit's options, read here directly (issue 57: one field per option):
  /// sensitivity_effects (injected oracle gains, nats, 0 allowed), sensitivity_draws (synthetic label
  /// draws per run and effect), sensitivity_threshold (recovery needed at
  /// sensitivity_threshold_effect, one of the effects, for "absent"), correction_ridge (the correction
  /// probe's cubic; negative: chosen per fit by 5-fold CV on the calibration half over
  /// kCorrectionRidges, method.md §6.5: it must not shrink small effects by design), refit_cold (refits
  /// start from a seeded random initialisation instead of the soft-reference fit) and smallest_effect:
  /// the oracle gain of an injection confined to one class (each run's most frequent predicted class),
  /// how much of a class-specific effect at the verdict's δ the probes recover (issue 54).
  FullAuditOptions audit;
  std::size_t statistic = 0;  ///< index into AuditRunInput::statistics: the routing statistic z
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

}  // namespace arcal
