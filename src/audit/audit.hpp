// The audit over many runs' traces: validates the inputs as a whole, runs the declared diagnostic
// family (every run x statistic) and AR-CondCal per run and statistic; results/audit_files.hpp writes
// them as DIR/results.json (schema "arcal.audit/2", docs/interface.md) plus CSV tables. Input arrays are plain
// vectors so the engine is independent of how traces were loaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "audit/audit_options.hpp"
#include "audit/condcal.hpp"
#include "audit/experts.hpp"
#include "audit/diagnostic.hpp"
#include "audit/integrity.hpp"
#include "audit/probe_compare.hpp"
#include "audit/run_summary.hpp"
#include "audit/sensitivity.hpp"
#include "audit/verdict.hpp"

namespace arcal {

/// Version 2 added `verdict` and the reliability rows' `band`; version 3 made the verdict the decision chain of
/// method.md §6.8 "The verdict" (`dependence`, `primary` = the gain interval, `smallest_effect`, `secondary`), every
/// probe comparison a gain (positive: routing helps) and the full-logit inputs class-ordered log-probabilities
/// (docs/interface.md); readers refuse earlier versions.
inline constexpr const char* kAuditSchema = "arcal.audit/3";

/// One run's audit input; every vector is [n].
struct AuditRunInput {
  std::string run;   ///< run id (file path or meta run id)
  std::string cell;  ///< runs of one cell differ only by seed (cross-seed stability)
  std::size_t classes = 0;
  std::vector<double> confidence, correct, predictive_entropy;
  std::vector<std::int64_t> labels;
  std::vector<std::string> statistic_names;     ///< [F]
  std::vector<std::vector<double>> statistics;  ///< [F][n]
  /// Probe inputs (method.md §6.3; only the LibTorch probe audit reads them): the profile [n, P]
  /// row-major (entropies H_p at the points with S_p > 1, or the chosen feature columns for traces
  /// without routing), the whole output on the log scale in class order, log-softmax [n, K] row-major
  /// (from the logits, so saturated probabilities keep their differences), and the predicted class [n]
  /// (argmax, lowest index on ties).
  std::vector<std::string> profile_names;  ///< [P]
  std::vector<double> profile;             ///< [n, P]
  std::vector<double> log_probs;           ///< [n, K]; empty in the reduced form
  std::vector<std::int64_t> predicted;     ///< [n]
  /// The reduced output form (issue 53; run_input.hpp kAuditFullOutputClasses): a vocabulary of
  /// `vocabulary` classes is read as `classes` groups (the most-predicted classes one each, the rest
  /// pooled; labels and predicted are then group indices, group_classes[g] the class of group g, -1 for
  /// the pool) and, instead of log_probs, the largest log-probabilities sorted descending with the log of
  /// the remaining mass last, [n, sorted_width]. Empty / 0 in the full form.
  std::size_t vocabulary = 0;
  std::vector<std::int64_t> group_classes;
  std::vector<std::int64_t> predicted_class;  ///< [n] the predicted class itself (reduced form only)
  std::vector<double> sorted_log_probs;
  std::size_t sorted_width = 0;
  /// What "the outputs" are to the probes and the exact null, in words (the report and results.json).
  std::string outputs;
  /// Mixture-of-experts traces (routing_kind "unordered"): the expert view (audit/experts.hpp), made from
  /// the whole trace by make_audit_run_input; only the run summary reads it.
  std::shared_ptr<const ExpertView> experts;
  /// The output row the integrity checks compare: log_probs (width classes) or sorted_log_probs.
  std::size_t output_width() const { return log_probs.empty() ? sorted_width : classes; }
  const double* output_row(std::size_t i) const {
    return log_probs.empty() ? sorted_log_probs.data() + i * sorted_width : log_probs.data() + i * classes;
  }
  /// Mean over examples of the token-mean routing weights, row-major [routing_points,
  /// routing_max_sources] (empty for traces without routing); only the run summaries read it.
  std::size_t routing_points = 0, routing_max_sources = 0;
  std::vector<int> routing_sources;
  std::vector<double> routing_mean;
  /// Cluster id per example ([n], from the trace's `cluster`; empty = independent examples): every
  /// split, permutation and bootstrap keeps a cluster whole (method.md §6.9 "Dependent examples").
  std::vector<std::int64_t> cluster;
};

struct AuditOptions {
  DiagnosticOptions diagnostic;
  CondCalOptions condcal;
  bool run_condcal = true;
  double smallest_effect = kDefaultSmallestEffect;  ///< the verdict's delta [nats] (method.md §6.8 "The verdict")
};

struct AuditCondCalEntry {
  std::string run, cell, statistic;
  CondCalResult result;
};

struct AuditCellBand {
  std::string cell;
  CondCalBand cv_nll, oracle_ece;  ///< confidence-only control, mean ± sd over the cell's runs
};

struct AuditResults {
  std::vector<RunSummary> run_summaries;  ///< one per run, input order (report figures)
  DiagnosticFamily diagnostic;
  std::vector<AuditCondCalEntry> condcal;
  std::vector<AuditCellBand> seed_bands;
  AuditOptions options;
  /// Every option of the audit as it ran (run_full_audit; the statistics resolved), written to and
  /// read from results.json "options" through the option table: a new option is recorded with no
  /// code here or in the writer (issue 57). False for a bare run_audit and for older results.json.
  bool has_settings = false;
  FullAuditOptions settings;
  bool has_probes = false;  ///< set by the LibTorch probe audit (audit/probes.hpp)
  ProbeFamily probes;
  bool has_sensitivity = false;  ///< set by the sensitivity audit (audit/sensitivity_audit.hpp)
  SensitivityResult sensitivity;
  bool has_exact_null = false;  ///< set by the exact-null audit
  ExactNullResult exact_null;
  /// make_verdict over the sections above; set by run_audit and again by whoever adds a section
  /// (run_full_audit), written and read with results.json.
  Verdict verdict;
  IntegrityResult integrity;  ///< set by run_full_audit (method.md §6.9 "Data integrity")
  /// Wall seconds of the diagnostic family and of AR-CondCal (NaN when not run); the probes,
  /// sensitivity and exact-null sections carry their own. results.json "seconds".
  double diagnostic_seconds = std::numeric_limits<double>::quiet_NaN();
  double condcal_seconds = std::numeric_limits<double>::quiet_NaN();
};

/// Checks the whole input before any computation: at least one run, the same class count in every
/// run, at least one statistic per run (an empty family is an error), matching sizes, n >= bins,
/// labels in [0, classes), no constant statistic. Throws InputError naming the run and the array.
void validate_audit_inputs(const std::vector<AuditRunInput>& runs, const AuditOptions& options);

/// validate_audit_inputs, then the diagnostic family and (if enabled) AR-CondCal and seed bands.
AuditResults run_audit(const std::vector<AuditRunInput>& runs, const AuditOptions& options);

}  // namespace arcal
