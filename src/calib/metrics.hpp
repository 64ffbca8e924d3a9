// Calibration metrics of method.md §4 on plain arrays: binned ECE/MCE/RMSCE, AdaECE, classwise ECE,
// debiased L2, smooth ECE (Błasiok & Nakkiran, relplot's definition), NLL, Brier, accuracy, AUROC,
// binary log-loss/Brier, and `calibration_report` with seeded percentile-bootstrap intervals.
// Probabilities are row-major [N, K]; labels are [N] in [0, K). Nothing here prints.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "calib/smooth_reliability.hpp"

#include "calib/binning.hpp"
#include "core/span.hpp"
#include "stats/bootstrap.hpp"

namespace arcal {

/// Top-label view: confidence c_i = max_k p_ik, prediction argmax (ties: lowest index), a_i = 1[pred = y].
struct TopLabel {
  std::vector<double> confidence;  ///< [N]
  std::vector<double> correct;     ///< [N] 0/1
  std::vector<int> prediction;     ///< [N]
};

/// Throws InputError when probs is not N*K, a probability is outside [0, 1] or NaN, or a label is out of range.
TopLabel top_label(const std::vector<double>& probs, std::size_t n, std::size_t k,
                   const std::vector<std::int64_t>& labels);

struct BinnedCalibration {
  double ece = 0.0;           ///< sum_b (n_b/N) |acc_b - conf_b|
  double mce = 0.0;           ///< max over non-empty bins
  double rmsce = 0.0;         ///< sqrt(sum_b (n_b/N) (acc_b - conf_b)^2)
  std::vector<BinRow> table;  ///< [B]
};

/// Binned calibration of a score against a 0/1 (or [0,1]) target, both [N]. bins >= 1.
/// Throws InputError on size mismatch, N = 0, values outside [0, 1].
BinnedCalibration binned_calibration(const std::vector<double>& conf, const std::vector<double>& target, int bins,
                                     BinScheme scheme = BinScheme::equal_width);

double expected_calibration_error(const std::vector<double>& conf, const std::vector<double>& target, int bins = 15);
/// AdaECE: ECE with equal-mass bins.
double adaptive_calibration_error(const std::vector<double>& conf, const std::vector<double>& target, int bins = 15);

/// Classwise ECE = (1/K) sum_k ECE(p_.k, 1[y = k]) with equal-width bins.
double classwise_calibration_error(const std::vector<double>& probs, std::size_t n, std::size_t k,
                                   const std::vector<std::int64_t>& labels, int bins = 15);

struct DebiasedL2 {
  double value = 0.0;    ///< sqrt(max(raw, 0))
  double raw = 0.0;      ///< sum_b (n_b/N) [(conf_b - acc_b)^2 - acc_b(1-acc_b)/(n_b-1)] over bins with n_b >= 2
  bool clipped = false;  ///< raw < 0 (the estimate was clipped to 0)
};
/// Kumar et al. (2019) debiased L2 calibration error on equal-width bins.
DebiasedL2 debiased_l2_calibration_error(const std::vector<double>& conf, const std::vector<double>& target,
                                         int bins = 15);

struct SmoothEce {
  double value = 0.0;  ///< smECE at sigma
  double sigma = 0.0;  ///< sigma*, the fixed point sigma = smECE_sigma found by bisection
};
/// Smooth ECE of (f, y), f in [0, 1], y in [0, 1], both [N] (relplot's smECE; see docs/method.md §4).
SmoothEce smooth_calibration_error(const std::vector<double>& f, const std::vector<double>& y);
/// smECE at a fixed bandwidth sigma > 0 on an M-point grid (M >= 2): the building block, exposed for tests.
double smooth_calibration_error_at(const std::vector<double>& f, const std::vector<double>& y, double sigma,
                                   std::size_t grid);

/// Mean -log p_{i, y_i}, probabilities clipped below at 1e-15.
double negative_log_likelihood(const std::vector<double>& probs, std::size_t n, std::size_t k,
                               const std::vector<std::int64_t>& labels);
/// Multiclass Brier: mean_i sum_k (p_ik - 1[y_i = k])^2 (in [0, 2]).
double brier_score(const std::vector<double>& probs, std::size_t n, std::size_t k,
                   const std::vector<std::int64_t>& labels);
/// AUROC of score for a 0/1 target, ties at average rank; NaN when one class is absent.
double auroc(const std::vector<double>& score, const std::vector<double>& target);
/// Binary log-loss of estimate q against 0/1 target a, q clipped to [1e-15, 1 - 1e-15].
double binary_log_loss(const std::vector<double>& estimate, const std::vector<double>& target);
/// Binary Brier: mean (q - a)^2.
double binary_brier(const std::vector<double>& estimate, const std::vector<double>& target);

struct Estimate {
  double value = 0.0;  ///< the plug-in value (netcal's, torchmetrics' and relplot's convention)
  /// 95 % interval for the population value (NaN bounds when not computed or not defined: MCE and
  /// smECE's bandwidth get none). smECE: basic bootstrap (2 smECE - the percentiles, clipped at 0;
  /// relplot's) over the first 100 resamples (sigma* searched again in each); it undercovers the
  /// population smECE (method.md §4), and the report says so. Accuracy, NLL, Brier, AUROC: percentile bootstrap
  /// (accuracy: the exact Clopper-Pearson interval where the bootstrap degenerates, all right or all wrong; at N = 1
  /// accuracy's is the only interval). ECE, RMSCE,
  /// AdaECE, classwise ECE, debiased L2: inversion of the consistency test along the scaled-gap family
  /// (calib/consistency.hpp); it corrects the upward bias of the plug-in value, which may therefore lie
  /// above the interval, and its lower end is 0 exactly when calibration is not rejected.
  Interval ci;
  /// Calibration errors: the median-unbiased estimate (the family member whose median error is the
  /// observed one; 0 when the observed error is below a calibrated model's median). NaN otherwise.
  double bias_corrected = std::numeric_limits<double>::quiet_NaN();
};

struct ReportOptions {
  int bins = 15;
  int draws = 1000;  ///< bootstrap resamples (0: no intervals)
  std::uint64_t seed = 0;
  double level = 0.95;
  /// Label redraws per family member of the calibration errors' test-inversion intervals
  /// (calib/consistency.hpp); 0: no intervals for them.
  int consistency_draws = 1000;
  /// > 0: every probs row must sum to 1 within this (InputError naming the row otherwise), checked in
  /// the one matrix scan; 0: rows are taken as given (trace files are checked when loaded).
  double row_sum_tolerance = 0.0;
  /// Cluster id per example ([n] >= 0, at least 2 distinct; empty = independent examples): the
  /// bootstrap then resamples whole clusters (tokens of one sequence, method.md §6.9 "Dependent examples"), the
  /// top-label calibration errors get that bootstrap's percentile interval, and the consistency tests (which redraw
  /// labels independently) are not run.
  std::vector<std::int64_t> cluster;
  /// The smooth reliability diagram (relplot's): the kernel curve at smECE's sigma* on a 200-point
  /// mesh with a percentile band from `smooth_draws` resamples of the same units (none when draws = 0).
  /// Off by default: the study's per-run metrics and arcal.metrics skip it; arcal metrics and
  /// arcal calibrate draw it.
  bool smooth_diagram = false;
  int smooth_draws = 200;
};

struct CalibrationReport {
  std::size_t n = 0, classes = 0;
  int bins = 15, draws = 0;
  std::size_t clusters = 0;  ///< clusters the bootstrap resampled (0: examples were resampled)
  std::uint64_t seed = 0;
  double level = 0.95;
  Estimate accuracy, ece, mce, rmsce, ada_ece, classwise_ece, debiased_ece, smece, smece_sigma, nll, brier, auroc;
  bool debiased_clipped = false;
  int consistency_draws = 0;
  /// Consistency tests (labels redrawn from the model's own probabilities): p of the observed top-label
  /// ECE (it decides the zero rule of every top-label calibration error) and of classwise ECE (its own
  /// rule). NaN when not computed.
  double consistency_p = std::numeric_limits<double>::quiet_NaN();
  double classwise_consistency_p = std::numeric_limits<double>::quiet_NaN();
  std::vector<BinRow> reliability;             ///< equal-width table [B]
  std::vector<BinRow> reliability_equal_mass;  ///< equal-mass table [B]
  bool has_smooth = false;                     ///< ReportOptions::smooth_diagram was set
  SmoothReliability smooth;
};

/// The report's metrics by their JSON key, in the order every output lists them (`arcal metrics`' table
/// and --json, the study section's reader).
inline constexpr std::array<std::pair<const char*, Estimate CalibrationReport::*>, 12> kReportMetrics{{
    {"accuracy", &CalibrationReport::accuracy},
    {"ece", &CalibrationReport::ece},
    {"mce", &CalibrationReport::mce},
    {"rmsce", &CalibrationReport::rmsce},
    {"ada_ece", &CalibrationReport::ada_ece},
    {"classwise_ece", &CalibrationReport::classwise_ece},
    {"debiased_ece", &CalibrationReport::debiased_ece},
    {"smece", &CalibrationReport::smece},
    {"smece_sigma", &CalibrationReport::smece_sigma},
    {"nll", &CalibrationReport::nll},
    {"brier", &CalibrationReport::brier},
    {"auroc", &CalibrationReport::auroc},
}};

/// Every metric of method.md §4 with seeded bootstrap intervals over examples (see Estimate::ci for
/// which interval each metric gets) and the consistency tests of its zero rule.
/// Cost: one scan of the [N, K] matrix (validation, top label, NLL/Brier terms, classwise cells), one
/// O(N) radix sort of the confidences, one O(N) pass for all top-label metrics. What the bootstrap
/// resamples: whole examples (rows), with replacement. Resample b is percentile_bootstrap's resample b
/// over confidence-sorted positions (stats/bootstrap_counts, Rng(derive_seed(seed, b))), held as
/// multiplicities, so every top-label metric, NLL and Brier of resample b comes from one O(N) weighted
/// pass with no re-sorting (smECE's bandwidth search runs on the first 100 resamples only). The calibration
/// errors' intervals cost O(cells) per label redraw (calib/consistency.hpp). The matrix scan runs on
/// std::thread::hardware_concurrency() threads when N x K >= 2^22 (fixed chunks of 2^15 rows whose classwise sums are
/// added in chunk order, so the result is the same for any thread count); the rest is single-threaded. Throws
/// InputError on invalid input or options. probs and labels are views (std::vector converts), read in place; the Python
/// module passes its own private copies (another Python thread may write the caller's arrays while this runs without
/// the GIL).
CalibrationReport calibration_report(Span<double> probs, std::size_t n, std::size_t k, Span<std::int64_t> labels,
                                     const ReportOptions& options = {});

/// Per-example top-label quantities: all that every metric of the report but classwise ECE reads.
struct TopLabelRows {
  std::vector<double> confidence;  ///< [N] the largest probability
  std::vector<double> correct;     ///< [N] 1 where the top class is the label
  std::vector<double> nll;         ///< [N] -log p(label)
  std::vector<double> brier;       ///< [N] sum_k (p_k - 1[k = y])^2
};

/// calibration_report from the top-label rows (a trace in the top-k form, io/trace.hpp): every metric,
/// interval and consistency test equal to calibration_report's on the full matrix these rows come
/// from, except classwise ECE, which needs every class's probability (value and interval NaN,
/// classwise_consistency_p NaN). `k` is the class count reported. Throws InputError on sizes or
/// values out of range.
CalibrationReport calibration_report_top_label(const TopLabelRows& rows, std::size_t k,
                                               const ReportOptions& options = {});

}  // namespace arcal
