// AR-CondCal (method.md §6.2): a 2-D Nadaraya-Watson probe of correctness on standardised
// (logit c, s), against matched controls that use the identical estimator and bandwidth rule
// (confidence only; predictive entropy in place of s; s shuffled within confidence bins), with
// Scott-multiple bandwidths chosen by 5-fold CV-NLL or by the optimistic global-ECE oracle, scored
// on the other half of a class-stratified 2-fold cross-fit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace arcal {

struct CondCalOptions {
  std::vector<double> multiples{0.25, 0.5, 1.0, 2.0, 4.0};  ///< Scott multiples m
  int cv_folds = 5;
  std::size_t ece_bins = 15;      ///< equal-width bins of the estimate (top-label binary ECE)
  std::size_t shuffle_bins = 15;  ///< equal-width confidence bins for the shuffled control
  double pseudo_count = 1.0;      ///< towards the calibration half's accuracy
  double clip = 1e-4;             ///< estimates clipped to [clip, 1 - clip]
  std::uint64_t seed = 0;
  int threads = 1;  ///< the smoother's query workers (0 = all cores); results do not depend on it
};

/// Scores of a correctness estimate on an evaluation half.
struct CalibrationScores {
  double ece = 0.0;                ///< 15 equal-width bins of the estimate vs correctness
  double worst_tertile_ece = 0.0;  ///< max over routing tertiles (cut points from the calibration half)
  double nll = 0.0;                ///< binary log-loss
  double brier = 0.0;              ///< binary Brier
};

struct CondCalArm {
  std::string name;  ///< "probe", "confidence_only", "predictive_entropy", "shuffled_within_bins"
  std::size_t dims = 0;
  CalibrationScores cv_nll;             ///< bandwidth by 5-fold CV-NLL on the calibration half (fold mean)
  CalibrationScores oracle_ece;         ///< bandwidth minimising evaluation ECE (optimistic bound; fold mean)
  std::array<double, 2> multiple_cv{};  ///< selected multiple per cross-fit fold
  std::array<double, 2> multiple_oracle{};
  /// The fixed-multiple rule: scores at every Scott multiple of options.multiples (fold mean), in
  /// that order; the bandwidth-sensitivity curve.
  std::vector<CalibrationScores> by_multiple;
};

struct CondCalResult {
  std::size_t n = 0;
  CalibrationScores uncalibrated;  ///< the raw confidence (clipped) on the same halves, fold mean
  std::vector<CondCalArm> arms;    ///< probe first, then the three controls
};

/// Runs AR-CondCal on one run. confidence [n] in [0,1], correct [n] in {0,1}, statistic [n] (the
/// routing statistic s), predictive_entropy [n], labels [n] >= 0 (for the stratified halves).
/// Bandwidth per coordinate: scott_bandwidth(column, dims, m) of the data the estimator is fitted on
/// (equivalent to standardising), so the 1-D control uses n^(-1/5) and the 2-D arms n^(-1/6).
/// Throws InputError on mismatched sizes, invalid values, a constant statistic or entropy, or too few
/// examples (each half needs >= 2 * cv_folds). With `cluster` [n] (dependent examples, method.md
/// §6.8) the halves and the bandwidth CV folds hold whole clusters (stats/splits.hpp).
CondCalResult ar_condcal(const std::vector<double>& confidence, const std::vector<double>& correct,
                         const std::vector<double>& statistic, const std::vector<double>& predictive_entropy,
                         const std::vector<std::int64_t>& labels, const CondCalOptions& options,
                         const std::vector<std::int64_t>& cluster = {});

/// Top-label binary ECE of estimates vs correctness with `bins` equal-width bins ([n] each).
double binary_ece(const std::vector<double>& estimate, const std::vector<double>& correct, std::size_t bins);

struct SeedBand {
  double mean = 0.0, sd = 0.0;  ///< sd with n - 1 (0 for one run)
  std::size_t runs = 0;
};
struct CondCalBand {
  SeedBand ece, worst_tertile_ece, nll, brier;
};

/// Mean ± 1 sd over runs (seeds) of one arm's scores (default the confidence-only control) under the
/// CV-NLL rule (oracle = false) or the oracle rule. Throws InputError when runs is empty or the arm
/// is missing.
CondCalBand seed_variance_band(const std::vector<CondCalResult>& runs, bool oracle = false,
                               const std::string& arm = "confidence_only");

}  // namespace arcal
