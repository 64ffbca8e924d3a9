// Descriptive per-run summaries that the audit records beside its tests, so that `arcal report` can
// draw every figure from results.json alone: the reliability table of each run (equal-width bins), the
// same per tertile of the first audited statistic, and the mean routing weights (point x source).
// Plain structs; the binning follows calib/binning.hpp (method.md §4 conventions).
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <limits>
#include <optional>
#include <vector>

#include "audit/experts.hpp"

namespace arcal {

struct AuditRunInput;

struct ReliabilityRow {
  std::size_t bin = 0;  ///< index of the equal-width bin
  std::size_t n = 0;
  double confidence = 0, accuracy = 0;
  /// Consistency band: the central 95 % of a calibrated model's accuracy in this bin
  /// (calibrated_accuracy_band); NaN when unknown (not computed).
  double band_low = 0, band_high = 0;
};

struct RunSummary {
  std::string run, cell;
  /// What the probes and the exact null read as "the outputs" (AuditRunInput::outputs; "" in results
  /// written before issue 53).
  std::string outputs;
  /// Share of the first statistic's variance the predicted class explains (adjusted eta^2 = 1 -
  /// (SS_within / (n - G)) / (SS_total / (n - 1)), G the classes predicted; NaN when undefined). Near 1:
  /// the routing mostly encodes which class (token) was predicted, an output (routers route by token).
  double class_explained = std::numeric_limits<double>::quiet_NaN();
  std::size_t n = 0, bins = 0;
  double accuracy = 0, mean_confidence = 0, ece = 0;
  std::vector<ReliabilityRow> reliability;  ///< non-empty bins only
  /// Tertiles (low, middle, high) of the run's first statistic; ties stay together
  /// (stats/splits.hpp equal_mass_group_index).
  std::string tertile_statistic;
  std::array<std::size_t, 3> tertile_n{};
  std::array<double, 3> tertile_accuracy{}, tertile_ece{};
  std::array<std::vector<ReliabilityRow>, 3> tertile_reliability;
  /// Mean over examples of the token-mean routing weights, row-major [points, sources]; empty when
  /// the trace has no routing arrays.
  std::size_t points = 0, sources = 0;
  std::vector<int> routing_sources;
  std::vector<double> routing_mean;
  /// Mixture-of-experts runs: the expert view (audit/experts.hpp); absent otherwise.
  std::optional<ExpertView> experts;
};

/// The first word of RunSummary::outputs for a run whose outputs were read in the reduced form of a large
/// vocabulary (audit/run_input.hpp kAuditFullOutputClasses).
inline constexpr const char* kReducedOutputs = "reduced";
inline bool read_in_reduced_form(const RunSummary& s) { return s.outputs.rfind(kReducedOutputs, 0) == 0; }

/// Summary of one run with `bins` equal-width confidence bins. Throws InputError (from the
/// binning) on inconsistent arrays.
RunSummary summarise_run(const AuditRunInput& run, std::size_t bins);

}  // namespace arcal
