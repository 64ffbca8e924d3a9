// Matched-confidence diagnostic (method.md §6.1): within confidence bins, compare the top and bottom
// tertiles of a routing statistic s. Two protocols per test: the seed paper's (reported as `paper`,
// never the decision): calibration residuals a - c, within-bin permutation of s; and the decision
// test: residuals a - q̂(c) against a cross-fitted monotone estimate of P(a = 1 | c), with s permuted
// within fine strata of c nested in the bins (a conditional permutation test that keeps the s-c
// dependence, so s cannot reject through c alone). A declared family of (run x statistic) tests gets
// raw, Holm and BH p-values for both protocols and a cross-seed stability verdict per cell. Examples
// that carry a cluster id (tokens of one sequence, method.md §6.9 "Dependent examples") get the clustered decision
// test: q̂ cross-fitted over whole clusters and a cluster sign-flip null of the stratum-centred gap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "calib/binning.hpp"
#include "stats/permutation.hpp"

namespace arcal {

struct DiagnosticOptions {
  std::size_t bins = 15;
  BinScheme scheme = BinScheme::equal_width;  ///< sensitivity analysis: 10 equal-mass bins
  std::size_t min_bin_count = 30;             ///< bins with fewer examples are dropped
  int permutations = 10000;
  std::uint64_t seed = 0;
  double alpha = 0.05;
  int threads = 0;  ///< worker threads over a family's tests (0 = the hardware's); results do not depend on it
  /// Decision test: examples per conditional-permutation stratum of c (equal-mass groups of the
  /// confidence-sorted examples of each kept bin, round(n_b / strata_size) of them, at least one).
  std::size_t strata_size = 20;
};

struct BinGap {
  std::size_t bin = 0;
  std::size_t n = 0, n_top = 0, n_bottom = 0;
  double acc_top = 0, conf_top = 0, acc_bottom = 0, conf_bottom = 0;
  double gap = 0;     ///< paper: (acc - conf)_top - (acc - conf)_bottom; decision: mean r_top - mean r_bottom
  double weight = 0;  ///< n / (examples in kept bins)
  double resid_top = 0, resid_bottom = 0;  ///< decision test: mean of a - q̂(c) in the tertile (0 for paper)
};

struct GapTestResult {
  double gap = 0.0;  ///< weighted gap G
  double p = 1.0;    ///< (1 + #{|G*| >= |G|}) / (R + 1)
  int permutations = 0;
  int exceed = 0;
  std::size_t n = 0;         ///< examples given
  std::size_t n_used = 0;    ///< examples in kept bins
  std::vector<BinGap> bins;  ///< kept bins only
  std::size_t bins_dropped = 0;
  /// Histogram of the permutation null of G (for the report's figure): kNullHistogramBins equal-width
  /// bins over [-m, m], m = 1.05 max(|G*|, |G|); null_edges has one more entry than null_counts.
  std::vector<double> null_edges;
  std::vector<std::size_t> null_counts;
  std::size_t strata = 0;  ///< decision test: conditional-permutation strata (0 for the paper protocol)
  /// Clustered decision test (clustered_residual_gap_test): the clusters whose signs the null flips;
  /// 0 for a test on independent examples (the null then permutes s).
  std::size_t clusters = 0;
};

inline constexpr std::size_t kNullHistogramBins = 40;

/// The strata of one matched-confidence test (kept bins only), before any permutation: each
/// stratum's values are the residuals a - c ordered top tertile, bottom tertile, middle.
struct MatchedStrata {
  std::vector<ContrastStratum> strata;
  std::vector<BinGap> bins;  ///< parallel to strata
  std::size_t n_used = 0;
  std::size_t bins_dropped = 0;
};

/// Bins, tertiles and residual strata as in matched_confidence_gap_test (same rules, same throws).
MatchedStrata matched_confidence_strata(const std::vector<double>& confidence, const std::vector<double>& correct,
                                        const std::vector<double>& statistic, const DiagnosticOptions& options);

/// One matched-confidence gap test. confidence [n] in [0,1], correct [n] in {0,1}, statistic [n]
/// finite. Within each bin, tertiles of the statistic follow equal_mass_group_index (a tied run of
/// statistic values never straddles a tertile boundary; it joins the lower tertile), so tertile sizes
/// depend only on the bin's multiset of values and are invariant under the permutation. A bin is kept
/// when it has >= min_bin_count examples and non-empty top and bottom tertiles.
/// Throws InputError on mismatched sizes, values out of range, n < bins, a constant statistic, or
/// when no bin is kept.
GapTestResult matched_confidence_gap_test(const std::vector<double>& confidence, const std::vector<double>& correct,
                                          const std::vector<double>& statistic, const DiagnosticOptions& options,
                                          std::uint64_t seed);

/// P(a = 1 | c) cross-fitted: the examples are split into two seeded random halves; each half's
/// estimate is an isotonic (PAV) regression of a on logit c fitted on the other half, linearly
/// interpolated in logit c and clipped to the end values (c clipped to [1e-12, 1 - 1e-12]). Returns
/// q̂(c_i) [n]. Throws InputError when n < 4 or sizes differ.
std::vector<double> cross_fitted_accuracy(const std::vector<double>& confidence, const std::vector<double>& correct,
                                          std::uint64_t seed);

/// The decision test of method.md §6.1 (same bins, bin dropping and tertile rule as the paper
/// protocol): residuals r = a - q̂(c) (cross_fitted_accuracy with seed derive_seed(seed, 1)), gap
/// G_r = Σ_b w_b (mean r_top - mean r_bottom), null: s permuted within equal-mass strata of c of about
/// strata_size examples nested in each kept bin, so each bin's multiset of s and tertile cut points
/// are unchanged and only which examples carry which tertile moves (R = options.permutations,
/// two-sided p as the paper test). Throws as matched_confidence_gap_test.
GapTestResult residual_gap_test(const std::vector<double>& confidence, const std::vector<double>& correct,
                                const std::vector<double>& statistic, const DiagnosticOptions& options,
                                std::uint64_t seed);

/// cross_fitted_accuracy with whole clusters to each half (cluster_kfold_assignment, k = 2) when
/// `cluster` [n] is non-empty, so no example's q̂ was fitted on its own cluster.
std::vector<double> cross_fitted_accuracy(const std::vector<double>& confidence, const std::vector<double>& correct,
                                          const std::vector<std::int64_t>& cluster, std::uint64_t seed);

/// The decision test for dependent examples (method.md §6.9 "Dependent examples"): cluster [n] >= 0 groups examples
/// that are not independent (tokens of a sequence). Bins, tertiles and strata as residual_gap_test; q̂ cross-fitted over
/// whole clusters. With phi_i the tertile weight of example i (w_b / n_top for the top tertile, -w_b / n_bottom for the
/// bottom, 0 between) centred within its stratum of c (phi~_i = phi_i - the stratum's mean, which removes what a smooth
/// error of q̂ shares with c), the gap is G_c = Σ_i phi~_i r_i = Σ_g T_g over clusters; null: G* = Σ_g e_g T_g with
/// independent signs e_g = ±1 (a wild cluster bootstrap / sign-flip test: valid whenever the clusters are independent
/// and E[r | c, s] = 0, whatever the dependence inside a cluster). p = (1 + #{|G*| >= |G_c|}) / (R + 1). The
/// within-stratum permutation of residual_gap_test moves single examples: under within-cluster dependence of both s and
/// the residuals its null is too narrow (docs/audit_validation.md measures it). Throws as residual_gap_test, and
/// InputError for a cluster of the wrong size, a negative id, or fewer than 2 clusters.
GapTestResult clustered_residual_gap_test(const std::vector<double>& confidence, const std::vector<double>& correct,
                                          const std::vector<double>& statistic,
                                          const std::vector<std::int64_t>& cluster, const DiagnosticOptions& options,
                                          std::uint64_t seed);

/// One declared test: a run, the cell it belongs to (runs of one cell differ only by seed) and a
/// statistic name, with its arrays ([n] each).
struct DiagnosticTestSpec {
  std::string run;
  std::string cell;
  std::string statistic;
  std::vector<double> confidence;
  std::vector<double> correct;
  std::vector<double> values;
  /// Cluster id per example ([n], or empty for independent examples): the decision test is then
  /// clustered_residual_gap_test; the paper protocol (reported only) stays as it is.
  std::vector<std::int64_t> cluster;
};

struct DiagnosticTest {
  std::string run, cell, statistic;
  GapTestResult result;  ///< the decision test (residual_gap_test)
  double p_holm = 1.0, p_bh = 1.0;
  GapTestResult paper;  ///< the paper protocol (matched_confidence_gap_test), reported, never the decision
  double paper_p_holm = 1.0, paper_p_bh = 1.0;
  /// Permutation seed: the paper test uses derive_seed(options.seed, index) (as before the decision
  /// test existed, so its numbers are unchanged); the decision test derive_seed(that, 0xD1A6).
  std::uint64_t seed = 0;
};

/// Cross-seed stability of one (cell, statistic), on the decision test: assessable only with >= 2
/// seeds; then positive ("stable") only when >= 2/3 of its seeds reject at alpha (raw p) with the same
/// sign of G.
struct StabilityVerdict {
  std::string cell, statistic;
  std::size_t seeds = 0, rejections = 0, rejections_positive = 0, rejections_negative = 0;
  bool assessable = false;
  bool stable = false;
  std::string verdict;  ///< "stable positive", "stable negative", "not stable", "not assessable (1 seed)"
};

struct DiagnosticFamily {
  std::vector<DiagnosticTest> tests;  ///< in declaration order
  std::size_t family_size = 0;
  std::vector<StabilityVerdict> verdicts;  ///< one per (cell, statistic), in first-seen order
  DiagnosticOptions options;
};

/// Runs the whole declared family (both protocols for every test). Throws InputError when the family is empty or any
/// test's inputs are invalid (the message names the test index, run and statistic).
DiagnosticFamily run_diagnostic_family(const std::vector<DiagnosticTestSpec>& family, const DiagnosticOptions& options);

}  // namespace arcal
