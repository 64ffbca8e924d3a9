// Scoring and comparison of correctness probes (method.md §6.3-6.4), standard library only. Each probe
// is fitted on J repeated 2-fold cross-fits (2J train/evaluate splits) and scored on every evaluation
// half (binary log-loss, Brier, ECE). A probe is compared with its matched control per run by the mean
// split-level Δ = probe − control with the Nadeau-Bengio corrected variance (the splits' scores share
// training data, and the refit's variability counts: an example-level interval conditional on the
// fitted probes is anti-conservative for "the probe procedure beats the control"), and across runs by
// a random-effects meta-analysis of the per-run Δ (Hartung-Knapp), with Wilcoxon and sign tests shown
// beside it with their smallest attainable p, and Holm over the comparison × metric family. The
// LibTorch side (audit/probes.hpp) fits the probes and fills these structs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stats/bootstrap.hpp"

namespace arcal {

/// Probe metrics, each the mean of the two cross-fit folds' values on their evaluation halves.
struct ProbeScores {
  double log_loss = 0.0;  ///< binary log-loss of P(correct), estimates clipped to [1e-15, 1 − 1e-15]
  double brier = 0.0;     ///< binary Brier
  double ece = 0.0;       ///< 15 equal-width bins of the estimate vs correctness (binary_ece)
};

struct ProbeFit {
  std::string name;        ///< "linear", "full_vector", "capacity_matched", ... (kProbeNames)
  std::size_t inputs = 0;  ///< input features
  std::int64_t parameters = 0;
  int hidden1 = 0, hidden2 = 0;           ///< 0 for the linear baseline
  double mean_epochs = 0.0;               ///< epochs to the best inner-validation loss (mean over splits)
  ProbeScores scores;                     ///< mean over the 2J splits of the evaluation-half scores
  std::vector<ProbeScores> split_scores;  ///< [2J] split (repeat r, fold f) at index 2r + f
  std::vector<double> prediction;         ///< [n] out-of-fold P(correct) averaged over repeats (not serialised)
};

struct MetricDelta {
  double delta = 0.0;                ///< mean over splits of probe − control (negative: the probe is better)
  Interval ci;                       ///< Nadeau-Bengio corrected t-interval (t_{2J−1}) at the family's level
  double se = 0.0;                   ///< sqrt((1/(2J) + n_eval/n_fit) · S²), S² the variance of the split-level Δ
  double p = 1.0;                    ///< two-sided t_{2J−1} test of Δ = 0
  std::vector<double> split_deltas;  ///< [2J]
};

/// Per-run comparison from split-level metric values (probe[s], control[s], s < 2J, J >= 1 repeats
/// of a 2-fold cross-fit): mean Δ, Nadeau & Bengio's (2003) corrected variance with n_eval / n_fit =
/// test_train_ratio, t-interval on 2J − 1 degrees of freedom. With one split (J would be 1/2) or every
/// split Δ identical the standard error is 0: p is 1 for Δ = 0, else 0, and the interval collapses.
/// Throws InputError on mismatched or empty inputs, non-finite values, or a level outside (0, 1).
MetricDelta split_delta(const std::vector<double>& probe, const std::vector<double>& control, double test_train_ratio,
                        double level = 0.95);

struct RunComparison {
  std::string name, probe, control;
  MetricDelta log_loss, brier, ece;
};

/// One pre-declared comparison of §6.3: probe vs its matched control.
struct ProbeComparisonSpec {
  const char* name;
  const char* probe;
  const char* control;
};

/// The comparisons that count, in reporting order.
inline constexpr std::array<ProbeComparisonSpec, 6> kProbeComparisons{{
    {"full_vector_vs_capacity_matched", "full_vector", "capacity_matched"},
    {"full_vector_vs_shuffled_global", "full_vector", "shuffled_global"},
    {"full_vector_vs_shuffled_within_bins", "full_vector", "shuffled_within_bins"},
    {"full_vector_vs_linear", "full_vector", "linear"},
    {"full_logit_routing_vs_full_logit", "full_logit_routing", "full_logit"},
    {"predictive_entropy_vs_capacity_matched", "predictive_entropy", "capacity_matched"},
}};

inline constexpr std::array<const char*, 3> kProbeMetrics{{"log_loss", "brier", "ece"}};

struct RunProbeResult {
  std::string run, cell;
  std::size_t n = 0;
  std::vector<std::string> profile_names;  ///< columns of the profile (entropy points or features)
  std::vector<ProbeFit> probes;
  std::vector<RunComparison> comparisons;
};

struct AcrossRunTest {
  std::string comparison, metric;
  std::vector<double> deltas;             ///< [runs] per-run Δ
  std::vector<double> variances;          ///< [runs] per-run se² (the random-effects weights)
  double mean_delta = 0.0;                ///< random-effects pooled Δ (the plain mean with one run)
  double plain_mean = 0.0;                ///< unweighted mean of deltas
  Interval ci;                            ///< Hartung-Knapp t_{runs−1} interval (one run: that run's interval)
  double p = 1.0;                         ///< the test that counts: Hartung-Knapp (one run: that run's split test)
  double tau2 = 0.0;                      ///< between-run variance (Paule-Mandel)
  double p_wilcoxon = 1.0, p_sign = 1.0;  ///< shown, not the decision
  double p_rank_min = 1.0;                ///< smallest p the rank tests can reach with these runs (3 runs: 0.25)
  double p_holm = 1.0;                    ///< Holm over the comparison × metric family, on p
  double detectable = 0.0;      ///< |Δ| this test detects with 80 % power at alpha ((t_{1−α/2} + t_{0.8}) · se)
  std::size_t runs_better = 0;  ///< runs whose own interval lies entirely below 0 (a count, not a test)
  std::size_t runs_worse = 0;   ///< ... entirely above 0
  std::string verdict;          ///< "gain", "loss" or "no detected difference" (probe_verdict)
  std::string power_note;       ///< what the runs can and cannot detect (empty when nothing to say)
};

struct ProbeFamily {
  std::vector<RunProbeResult> runs;
  std::vector<AcrossRunTest> tests;  ///< kProbeComparisons × kProbeMetrics
  // Options echoed into results.json.
  int restarts = 0, max_epochs = 0, patience = 0, batch_size = 0, repeats = 0;
  double lr = 0.0, weight_decay = 0.0, inner_val = 0.0, alpha = 0.05;
  std::size_t shuffle_bins = 15, ece_bins = 15;
  std::uint64_t seed = 0;
  double seconds = 0.0;  ///< wall time of the probe audit
};

/// Scores of an out-of-fold estimate [n] against correct [n] in {0,1}; fold [n] in {0,1} says which
/// cross-fit fold evaluated each example (the mean of the two folds' scores). Throws InputError on size
/// mismatch, an estimate outside [0,1] or a fold with no example.
ProbeScores score_probe(const std::vector<double>& estimate, const std::vector<double>& correct,
                        const std::vector<int>& fold, std::size_t ece_bins = 15);

/// Scores of one evaluation half: estimate [m] in [0, 1] against correct [m] in {0, 1}.
ProbeScores score_half(const std::vector<double>& estimate, const std::vector<double>& correct,
                       std::size_t ece_bins = 15);

/// Per-run comparison of two fitted probes from their split scores (split_delta per metric).
RunComparison compare_probes(const ProbeFit& probe, const ProbeFit& control, const std::string& name,
                             double test_train_ratio, double level = 0.95);

/// Across-run tests for every kProbeComparisons × kProbeMetrics cell (runs must all carry every
/// comparison): Hartung-Knapp random effects on the per-run Δ with their variances (one run: that run's
/// own test), Wilcoxon signed-rank and sign test with their smallest attainable p, Holm over the family
/// on the random-effects p, the verdict and a power note. Throws InputError when runs is empty or a run
/// lacks a comparison (naming it).
std::vector<AcrossRunTest> across_run_probe_tests(const std::vector<RunProbeResult>& runs, double alpha);

/// "gain" when p_holm < alpha and mean Δ < 0, "loss" when p_holm < alpha and mean Δ > 0, otherwise
/// "no detected difference". The only words of significance the audit writes.
std::string probe_verdict(double mean_delta, double p_holm, double alpha);

}  // namespace arcal
