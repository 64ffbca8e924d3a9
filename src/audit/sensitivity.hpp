// The standard-library side of the sensitivity (injection) and exact-null audits of method.md
// §6.5-6.6: the 1-D Nadaraya-Watson reference q(c), the reference-preserving correction probe
// σ(logit q + g(z)) with q frozen and g a ridge-penalised cubic in the clipped routing statistic, the
// recovery summaries with their bootstrap over (run, draw) units, the Monte-Carlo p of a real gain
// against its null replicates, and the result structs that results.json serialises. The LibTorch
// side (audit/sensitivity.hpp) refits the MLP probes and fills these structs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stats/bootstrap.hpp"

namespace arcal {

/// The reference q(c) of §6.5: a 1-D Nadaraya-Watson estimate of correctness on logit c (c clipped to
/// [1e-6, 1 − 1e-6]) fitted on the rows `fit` of (confidence, correct), Scott bandwidth (multiple 1,
/// n^(−1/5)), pseudo-count 1 towards the fitted rows' accuracy, clipped to [1e-4, 1 − 1e-4], and
/// evaluated at every example. Returns [n]. Throws InputError on mismatched sizes, invalid values,
/// fewer than 2 fitting rows, an index out of range or constant confidence on the fitting rows.
std::vector<double> nw_confidence_reference(const std::vector<double>& confidence, const std::vector<double>& correct,
                                            const std::vector<std::size_t>& fit);

/// (x − mean) / sd (sd with n − 1) of a finite, non-constant vector. Throws InputError otherwise.
std::vector<double> standardise(const std::vector<double>& x, const char* function, const char* name);

/// The reference-preserving correction probe: P(correct) = σ(logit q + g(z)) with q frozen and
/// g(z) = β0 + β1 u + β2 u² + β3 u³, u = clamp(z, −3, 3)/3, fitted by Newton's method on the penalised
/// log-likelihood Σ log-lik − (ridge/2)·|β|² (every coefficient penalised, so g shrinks towards 0 and
/// the fit towards q).
struct CorrectionProbe {
  std::array<double, 4> beta{};
  int iterations = 0;
};

/// Fits on q [n] in (0,1), z [n] finite, y [n] in [0,1]. ridge >= 0. Throws InputError on
/// mismatched sizes, invalid values or a negative ridge.
CorrectionProbe fit_correction_probe(const std::vector<double>& q, const std::vector<double>& z,
                                     const std::vector<double>& y, double ridge);
/// Candidate ridges of the correction probe's inner cross-validation (0 included: no shrinkage).
inline constexpr std::array<double, 6> kCorrectionRidges{{0.0, 0.1, 1.0, 10.0, 100.0, 1000.0}};

/// The ridge among `ridges` with the lowest `folds`-fold cross-validated log-loss of the correction
/// probe on (q, z, y) (seeded fold assignment; ties to the larger ridge). Throws as fit_correction_probe
/// or when there are fewer examples than folds.
double choose_correction_ridge(const std::vector<double>& q, const std::vector<double>& z, const std::vector<double>& y,
                               const std::array<double, 6>& ridges, int folds, std::uint64_t seed);

/// σ(logit q_i + g(z_i)) [n].
std::vector<double> apply_correction_probe(const CorrectionProbe& probe, const std::vector<double>& q,
                                           const std::vector<double>& z);

/// Per-unit log-losses of one injected effect: a unit is one (run, synthetic draw), each loss the mean
/// of the two cross-fit folds' evaluation halves.
struct RecoveryUnits {
  std::vector<double> loss_reference;           ///< ℓ(q) [units]
  std::vector<double> loss_truth;               ///< ℓ(p*) [units]
  std::vector<std::vector<double>> loss_probe;  ///< [probe][units]
};

/// One probe at one injected effect.
struct RecoveryEstimate {
  std::string probe;
  double gain = 0.0;          ///< mean over units of ℓ(q) − ℓ(probe), nats (positive: the probe beats q)
  Interval gain_ci;           ///< percentile bootstrap over units
  bool has_recovery = false;  ///< false when the effect is 0 (R undefined)
  double recovery = 0.0;      ///< R = Σ(ℓ(q) − ℓ(probe)) / Σ(ℓ(q) − ℓ(p*)) over units (ratio of means)
  Interval recovery_ci;       ///< the same bootstrap resamples
  double mean_epochs = 0.0;   ///< MLP refits: mean epochs to the best inner-validation loss
};

/// Ratio-of-means recovery and mean gain per probe, with one percentile bootstrap (draws, seed) over
/// units shared by all probes. has_recovery when effect_nats > 0. Throws InputError on mismatched
/// sizes or no units.
std::vector<RecoveryEstimate> summarise_recovery(const RecoveryUnits& units, const std::vector<std::string>& probes,
                                                 double effect_nats, int draws, std::uint64_t seed);

/// Monte-Carlo p of a real statistic against null replicates: (1 + #{null >= real})/(R + 1), with
/// ">=" read as null >= real − 1e-12 (summation-order rounding). Throws InputError when null is empty.
double monte_carlo_p(double real, const std::vector<double>& null);

/// Besag & Clifford's (1991) sequential Monte-Carlo p with stopping count h: replicates are read in
/// order until h of them are at or above real − 1e-12; if that happens at replicate L (1-based),
/// p = h / L; otherwise p = (1 + #{null ≥ real − 1e-12}) / (n + 1) over all n drawn (monte_carlo_p).
/// Valid (P(p ≤ u) ≤ u under the null) whatever h; h = 0 is monte_carlo_p.
double sequential_p(double real, const std::vector<double>& null, std::size_t h);

/// The stopping count that settles a Monte-Carlo test at level alpha with at most n replicates:
/// h = floor(alpha (n + 1)) + 1. Once h replicates reach the real value, the fixed-n p would exceed
/// alpha, and so does h / L (L ≤ n), so stopping there changes no decision at alpha or below.
std::size_t settling_count(double alpha, std::size_t n);

struct SensitivityEffect {
  double effect_nats = 0.0;
  /// "every class": t = tanh z on every example; "one class": t = tanh z only on examples predicted as
  /// the run's most frequent predicted class (`classes`, per run), 0 elsewhere (issue 54).
  std::string kind = "every class";
  std::vector<std::int64_t> classes;   ///< [runs] the class of a "one class" injection (empty otherwise)
  std::vector<double> delta;           ///< [runs × 2] δ per run and fold (run-major)
  std::vector<double> oracle_gain;     ///< [runs × 2] the exact expected KL reached by the bisection
  double correction_ridge = 0.0;       ///< mean ridge of the correction probe's fits (chosen by inner CV unless fixed)
  double mean_oracle_loss_gain = 0.0;  ///< mean over units of ℓ(q) − ℓ(p*) (the realised oracle gain)
  std::vector<RecoveryEstimate> probes;
};

struct SensitivityVerdict {
  std::string probe;
  double recovery = 0.0;
  Interval recovery_ci;
  std::string verdict;  ///< "absent (the audit would have seen Δ)" or "not detected (underpowered)"
};

/// How the sensitivity and exact-null audits refit the probes (method.md §6.7), recorded in results.json.
struct RefitSettings {
  int restarts = 0, max_epochs = 0, patience = 0, batch_size = 0;
  double lr = 0.0;
  bool warm_start = false;
  std::size_t subsample = 0;          ///< most examples per run refitted on (0: all; --refit-subsample)
  std::vector<std::size_t> examples;  ///< [runs] examples each run's refits used (its n when not cut)
};

/// One sentence on the examples the refits used: "" when every run was refitted whole (subsample 0
/// or no run at the cap), else "Refits on at most N examples per run (a seeded uniform subsample of each
/// larger run, --refit-subsample; examples refitted: a, b, c): valid, with the power of that many."
std::string refit_scope_text(const RefitSettings& r);

struct SensitivityResult {
  std::vector<std::string> runs;
  std::string statistic;  ///< the routing statistic z is standardised from
  std::vector<double> effects;
  std::vector<double> class_effects;  ///< the "one class" injections (by_effect after the effects)
  int draws = 0, bootstrap_draws = 0;
  double threshold = 0.5, threshold_effect = 0.01;
  double correction_ridge = -1.0;  ///< fixed ridge, or negative: inner CV (see by_effect[].correction_ridge)
  std::uint64_t seed = 0;
  RefitSettings refit;
  std::vector<SensitivityEffect> by_effect;
  std::vector<SensitivityVerdict> verdicts;  ///< at threshold_effect, one per probe
  double seconds = 0.0;
};

/// One comparison (probe vs control) of one run under one exact-null variant.
struct ExactNullComparison {
  std::string comparison, probe, control;
  double real_gain = 0.0;         ///< ℓ(control) − ℓ(probe) on the real labels (same refit procedure)
  std::vector<double> null_gain;  ///< [replicates]
  double null_mean = 0.0, null_q95 = 0.0;
  double p = 1.0;  ///< monte_carlo_p(real_gain, null_gain)
};

/// How well the examples of a conditional permutation null are matched (method.md §6.6 a).
struct NullMatching {
  std::string space;           ///< "logit c", or the profile predicted from the sorted probabilities
  std::size_t group_size = 0;  ///< target group size (a last group may be up to 2 x size - 1)
  std::size_t groups = 0;
  double mean_distance = 0.0;         ///< mean within-group pairwise distance (matching space units)
  double random_pair_distance = 0.0;  ///< mean distance of random pairs (the scale)
};

/// Goodness of fit of a model-based null's reference ĝ on held-out data: Hosmer-Lemeshow over deciles
/// of ĝ on each fold's evaluation half (ĝ fitted on the calibration half, so df = groups per fold).
struct ReferenceFit {
  double statistic = 0.0;
  double df = 0.0;
  double p = 1.0;  ///< small: ĝ is misspecified and the model-based null cannot be trusted
};

struct ExactNullRun {
  std::string run, variant;  ///< variant "confidence" (conditions on c) or "full_logit" (on the output vector)
  std::vector<ExactNullComparison> comparisons;
  NullMatching matching;       ///< conditional permutation null only
  ReferenceFit reference_fit;  ///< model-based null only
};

/// Across runs: the mean real gain against the null distribution of the mean over runs (replicate r
/// of every run pooled).
struct ExactNullPooled {
  std::string variant, comparison;
  double real_mean_gain = 0.0, null_mean = 0.0, null_q95 = 0.0, p = 1.0;
  std::size_t runs = 0;
  std::size_t replicates = 0;          ///< null replicates drawn (fewer than requested when stopped early)
  std::vector<double> null_mean_gain;  ///< [replicates] replicate j's gain averaged over runs: the pooled null
};

/// The exact-null audit. The decision null (runs, pooled) permutes the routing profile within matched
/// groups of examples with nearly identical outputs and refits on the real labels (method.md §6.6 a);
/// the model-based null (model_runs, model_pooled) draws labels from a fitted reference ĝ (§6.6 b) and
/// is valid only if ĝ is right (reference_fit says how well it fits held-out data).
struct ExactNullResult {
  std::vector<std::string> variants;
  int replicates = 0;  ///< the most replicates per run and variant
  /// Sequential stopping (method.md §6.7): the decision null stops drawing once every pooled comparison
  /// of a variant has this many null means at or above its real mean (settling_count); 0: fixed count.
  std::size_t stop_after = 0;
  std::size_t group_size = 0;
  std::uint64_t seed = 0;
  RefitSettings refit;
  std::vector<ExactNullRun> runs;
  std::vector<ExactNullPooled> pooled;
  bool has_model_based = false;
  std::vector<ExactNullRun> model_runs;
  std::vector<ExactNullPooled> model_pooled;
  double seconds = 0.0;
};

}  // namespace arcal
