// Scoring and comparison of correctness probes (method.md §6.3-6.4), standard library only: each
// probe's out-of-fold P(correct) is scored per cross-fit fold (binary log-loss, Brier, ECE) and the
// fold scores averaged; a probe is compared with its matched control by Δ = probe − control with a
// paired bootstrap over evaluation examples, and across runs by Wilcoxon, sign test and a bootstrap
// of mean Δ with Holm over the comparison × metric family. The LibTorch side (audit/torch/probes.hpp)
// fits the probes and fills these structs.
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
  std::string name;          ///< "linear", "full_vector", "capacity_matched", ... (kProbeNames)
  std::size_t inputs = 0;    ///< input features
  std::int64_t parameters = 0;
  int hidden1 = 0, hidden2 = 0;  ///< 0 for the linear baseline
  double mean_epochs = 0.0;      ///< epochs to the best inner-validation loss (mean over folds, restarts)
  ProbeScores scores;
  std::vector<double> prediction;  ///< [n] out-of-fold P(correct) (not serialised)
};

struct MetricDelta {
  double delta = 0.0;  ///< probe − control (negative: the probe is better)
  Interval ci;         ///< paired percentile bootstrap over evaluation examples
};

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
  std::vector<double> deltas;  ///< [runs] per-run Δ
  double mean_delta = 0.0;
  Interval ci;                 ///< percentile bootstrap of the mean Δ over runs
  double p_wilcoxon = 1.0, p_sign = 1.0;
  double p_holm = 1.0;         ///< Holm over the comparison × metric family, on p_wilcoxon
  std::size_t runs_better = 0; ///< runs whose within-run CI lies entirely below 0
  std::size_t runs_worse = 0;  ///< ... entirely above 0
  std::string verdict;         ///< "gain", "loss" or "no detected difference" (see probe_verdict)
};

struct ProbeFamily {
  std::vector<RunProbeResult> runs;
  std::vector<AcrossRunTest> tests;  ///< kProbeComparisons × kProbeMetrics
  // Options echoed into results.json.
  int restarts = 0, max_epochs = 0, patience = 0, batch_size = 0, bootstrap_draws = 0;
  double lr = 0.0, weight_decay = 0.0, inner_val = 0.0, alpha = 0.05;
  std::size_t shuffle_bins = 15, ece_bins = 15;
  std::uint64_t seed = 0;
  double seconds = 0.0;  ///< wall time of the probe audit
};

/// Scores of an out-of-fold estimate [n] against correct [n] in {0,1}; fold [n] in {0,1} says which
/// cross-fit fold evaluated each example. Throws InputError on size mismatch, an estimate outside
/// [0,1] or a fold with no example.
ProbeScores score_probe(const std::vector<double>& estimate, const std::vector<double>& correct,
                        const std::vector<int>& fold, std::size_t ece_bins = 15);

/// Δ = probe − control per metric, with a paired percentile bootstrap (95 %) that resamples
/// evaluation examples within each fold (Rng streams derive_seed(seed, fold)) and recomputes the
/// fold-mean metrics of both probes on the same resample. Throws as score_probe.
RunComparison compare_probes(const ProbeFit& probe, const ProbeFit& control, const std::string& name,
                             const std::vector<double>& correct, const std::vector<int>& fold, int draws,
                             std::uint64_t seed, std::size_t ece_bins = 15);

/// Across-run tests for every kProbeComparisons × kProbeMetrics cell (runs must all carry every
/// comparison). Wilcoxon signed-rank and sign test on the per-run Δ (p = 1 when every Δ is zero),
/// percentile bootstrap of the mean Δ over runs (draws, seed), Holm over the family on the Wilcoxon
/// p. Throws InputError when runs is empty or a run lacks a comparison (naming it).
std::vector<AcrossRunTest> across_run_probe_tests(const std::vector<RunProbeResult>& runs, int draws,
                                                  std::uint64_t seed, double alpha);

/// "gain" when p_holm <= alpha and mean Δ < 0, "loss" when p_holm <= alpha and mean Δ > 0, otherwise
/// "no detected difference".
std::string probe_verdict(double mean_delta, double p_holm, double alpha);

}  // namespace arcal
