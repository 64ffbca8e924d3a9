// The probe audit of method.md §6.3-6.4 for one or many runs: on the class-stratified 2-fold
// cross-fit halves of AR-CondCal, fits the linear baseline (Platt on logit c), the full-vector MLP on
// (logit c, predicted class, profile), its capacity-matched control on (logit c, predicted class),
// globally and within-bin shuffled profile twins, the predictive-entropy MLP, and the full-logit
// reference on the whole output with its routing-augmented twin (the first five corrections of a
// capacity-matched MLP on logit c, the full-logit pair of per-class Platt scaling); scores out-of-fold P(correct),
// compares each probe with its matched control (audit/probe_compare.hpp) and tests the comparisons across runs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "audit/audit.hpp"
#include "audit/probe_compare.hpp"
#include "audit/mlp_probe.hpp"
#include "stats/splits.hpp"

namespace arcal {

struct ProbeAuditOptions {
  /// Architecture and training of every MLP; mlp.seed is ignored (seeds derive from `seed`).
  MlpProbeOptions mlp = default_probe_mlp_options();
  std::size_t shuffle_bins = 15;  ///< equal-width confidence bins of the within-bin shuffle
  std::size_t ece_bins = 15;
  /// Repeated 2-fold cross-fits per run (2 x repeats train/evaluate splits; the first is AR-CondCal's
  /// halves): the per-run comparison's variance includes the refits' (method.md §6.4).
  int repeats = 5;
  double alpha = 0.05;     ///< verdict level on Holm-adjusted p
  std::uint64_t seed = 0;  ///< the audit seed: run r uses derive_seed(seed, r), as AR-CondCal
  /// Probes to fit (kProbeNames order is kept); empty = all. Comparisons whose probe or control is
  /// not fitted are skipped (run_probe_family needs all of them).
  std::vector<std::string> only;
  /// The routing-augmented probes and their shuffled twins as corrections of a fitted output-only
  /// probe (docs/method.md §6.7). false restores the earlier definition (every MLP fitted on its own),
  /// kept only to reproduce the before/after validation in docs/audit_validation.md.
  bool corrections = true;

  /// The audit's training defaults (docs/method.md §6.7): 1 restart per split (the 5 repeats of the
  /// cross-fit average 10 fits per example's probe), lr 3e-3, batch 512, at most 100 epochs, patience 5.
  static MlpProbeOptions default_probe_mlp_options();
};

/// Probe names in fitting order.
inline constexpr std::array<const char*, 8> kProbeNames{{"linear", "full_vector", "capacity_matched", "shuffled_global",
                                                         "shuffled_within_bins", "predictive_entropy", "full_logit",
                                                         "full_logit_routing"}};

/// The probes of one run as a reusable design (method.md §6.3 inputs, shuffles, widths and cross-fit
/// halves, all fixed by the run and its seed), so the sensitivity and exact-null audits (§6.5-6.6) can
/// refit exactly the same probes on other labels. Built by make_probe_design.
struct ProbeDesign {
  struct Spec {
    std::string name;
    std::vector<std::size_t> cols;  ///< indices into columns
    int hidden1 = 0, hidden2 = 0;
    /// Correction probes (method.md §6.7): the name of the probe whose fitted logit is this probe's
    /// fixed offset, P = σ(logit p_base + MLP(cols)); empty for a probe fitted on its own.
    std::string base;
    /// Not an MLP: Platt scaling of logit c per predicted class, shrunk towards the pooled Platt fit
    /// (the least a reference that conditions on the outputs must express, method.md §6.3); cols unused.
    bool per_class_platt = false;
  };
  std::size_t n = 0;
  std::uint64_t run_seed = 0;                        ///< derive_seed(options.seed, run_index)
  std::array<SplitIndices, 2> folds;                 ///< AR-CondCal's cross-fit halves (= repeats[0])
  std::vector<std::array<SplitIndices, 2>> repeats;  ///< the probe audit's repeated cross-fits
  std::vector<int> fold_of;                          ///< [n] fold whose evaluation half holds example i
  std::vector<double> confidence;                    ///< [n] (the linear probe's input)
  std::vector<std::int64_t> predicted;               ///< [n] predicted class (or its group in the reduced form)
  std::size_t classes = 0;
  /// The predicted class itself, densified to 0..platt_classes-1 ([n]): the per-class Platt base and the
  /// exact null's within-class permutations read it, so in the reduced output form they still condition
  /// on every class, not on its group (= predicted, classes in the full form).
  std::vector<std::int64_t> platt_class;
  std::size_t platt_classes = 0;
  /// The sorted log-probabilities, the last sorted_width columns of the full-logit probe (K in the full
  /// form; the head and the rest's log-mass in the reduced form, AuditRunInput::sorted_width).
  std::size_t sorted_width = 0;
  std::vector<std::vector<double>> columns;  ///< feature columns, each [n]
  /// Where a column comes from: profile column `profile` (-1: not from the profile) read through the
  /// row map `rows` (0 identity, 1 perm_global, 2 perm_bins), so a replicate with a permuted profile
  /// (the conditional permutation null, §6.6) can rebuild every profile-derived column consistently.
  struct ColumnSource {
    int profile = -1;
    int rows = 0;
  };
  std::vector<ColumnSource> sources;                ///< [columns]
  std::vector<std::size_t> perm_global, perm_bins;  ///< the shuffled controls' row maps [n]
  std::vector<Spec> mlps;                           ///< MLP probes in kProbeNames order (those wanted)
  bool linear = true;                               ///< whether the linear probe is wanted
};

/// Out-of-fold predictions of a design's probes on given labels.
struct ProbeRefit {
  std::vector<std::string> names;                        ///< kProbeNames order ("linear" first if fitted)
  std::vector<std::array<std::vector<double>, 2>> eval;  ///< [probe][fold] P(correct) on fold f's evaluation half
  std::vector<std::array<MlpWeights, 2>> weights;        ///< [probe][fold] (empty for "linear")
  std::vector<double> mean_epochs;                       ///< [probe] mean over folds
  std::vector<std::int64_t> parameters;                  ///< [probe]
};

/// What may differ between the replicates of one stacked refit besides their labels: the cross-fit
/// halves, and a permutation of the profile's rows (profile'[i] = profile[permutation[i]]; every
/// profile-derived column, the shuffled controls included, is rebuilt from it). nullptr: the design's.
struct ReplicateSpec {
  const std::array<SplitIndices, 2>* folds = nullptr;
  const std::vector<std::size_t>* profile_permutation = nullptr;
};

/// True when the design's MLP spec reads a profile-derived column.
bool reads_profile(const ProbeDesign& design, const ProbeDesign::Spec& spec);

/// Builds the design of run_probes (validates as run_probes). run_index selects the seed stream.
ProbeDesign make_probe_design(const AuditRunInput& run, std::size_t run_index, const ProbeAuditOptions& options);

/// Fits every probe of the design on fold f's calibration half with labels y[f] ([n] each; only the
/// calibration rows are read) and predicts fold f's evaluation half. mlp gives the training settings
/// (its widths and seed are replaced per probe and fold: fold f uses seeds[f]); warm ([probe][fold],
/// same order as the design's probes, "linear" included with empty weights) starts every MLP from
/// an earlier fit; with mlp.soft_labels the linear probe is skipped (Platt needs binary labels).
/// Throws InputError on mismatched sizes or invalid labels (naming the array and index).
ProbeRefit fit_probe_design(const ProbeDesign& design, const std::array<const std::vector<double>*, 2>& y,
                            const MlpProbeOptions& mlp, const std::array<std::uint64_t, 2>& seeds,
                            const std::vector<std::array<MlpWeights, 2>>* warm = nullptr);

/// fit_probe_design for R label sets at once: ys[j] = {labels for fold 0, labels for fold 1} of
/// replicate j. Every replicate uses the same seeds (so the same inner splits and batch orders: common
/// random numbers) and starting weights; each MLP probe and fold is one stacked fit of all replicates
/// (fit_predict_mlp_probes), and replicate j's result equals fit_probe_design on ys[j] alone.
/// keep_weights = false leaves ProbeRefit::weights empty (R copies of every network add up).
/// specs ([R] or nullptr) gives replicates their own halves and/or profile permutation; a probe whose
/// inputs do not read the profile, on replicates that share halves and label vectors (the same
/// pointers), is fitted once and its result copied (it would be identical).
std::vector<ProbeRefit> fit_probe_design_replicates(const ProbeDesign& design,
                                                    const std::vector<std::array<const std::vector<double>*, 2>>& ys,
                                                    const MlpProbeOptions& mlp,
                                                    const std::array<std::uint64_t, 2>& seeds,
                                                    const std::vector<std::array<MlpWeights, 2>>* warm = nullptr,
                                                    bool keep_weights = false,
                                                    const std::vector<ReplicateSpec>* specs = nullptr);

/// Checks every run's probe inputs (the checks of run_probes) before any computation, so the CLI can
/// refuse bad input before the diagnostic runs. Throws InputError naming the run, array and index.
void validate_probe_inputs(const std::vector<AuditRunInput>& runs, const ProbeAuditOptions& options);

/// Probes and within-run comparisons of one run (run_index selects the run's seed stream).
/// Needs run.profile [n, P >= 1] and run.sorted_probs [n, classes]; throws InputError naming the run,
/// array and index on missing or mismatched arrays, non-finite values, a constant profile column, or
/// an unknown name in options.only.
RunProbeResult run_probes(const AuditRunInput& run, std::size_t run_index, const ProbeAuditOptions& options);

/// run_probes for every run, then across_run_probe_tests. Records the options and the wall time.
ProbeFamily run_probe_family(const std::vector<AuditRunInput>& runs, const ProbeAuditOptions& options);

}  // namespace arcal
