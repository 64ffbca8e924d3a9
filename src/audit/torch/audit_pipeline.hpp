// The whole audit of `arcal audit` as one library call: the diagnostic family and AR-CondCal
// (audit/audit.hpp), then the MLP probes, the sensitivity audit and the exact-null audit when asked.
// The CLI and the Python module's arcal.audit both call it with the same options, so both compute
// the same results.json (audit_results_json of what it returns).
#pragma once

#include <string>
#include <vector>

#include "audit/audit.hpp"

namespace arcal {

/// Every option of `arcal audit` (docs/interface.md), with the CLI's defaults.
struct FullAuditOptions {
  int permutations = 10000;   ///< within-bin permutations R
  std::uint64_t seed = 0;     ///< permutations, splits, shuffles, probe seeds
  std::size_t bins = 15;
  bool equal_mass = false;
  double alpha = 0.05;
  bool condcal = true;
  bool probes = true;
  int probe_restarts = 1;     ///< seeded restarts averaged per MLP probe and split
  int probe_repeats = 5;      ///< repeated 2-fold cross-fits per run
  bool sensitivity = false;
  std::vector<double> sensitivity_effects{0.002, 0.005, 0.010, 0.020};
  int sensitivity_draws = 20;
  double sensitivity_threshold = 0.5;
  double sensitivity_threshold_effect = 0.010;
  double correction_ridge = -1.0;  ///< the correction probe's ridge; -1: chosen by inner CV (method.md §6.5)
  bool exact_null = false;
  int null_replicates = 200;
  std::vector<std::string> null_variants{"confidence", "full_logit"};
  std::size_t null_group_size = 5;  ///< matched-group size of the conditional permutation null (2-10)
  bool null_model_based = true;     ///< also run the model-based null (§6.6 b), labelled as such
  int refit_restarts = 1;
  int refit_patience = 3;
  bool refit_cold = false;
  int threads = 0;        ///< workers for the MLP fits (0 = all cores); results do not depend on it
  bool progress = false;  ///< progress lines and bars on stderr
};

/// Checks the runs and options as a whole before any computation (the audit's and, when probes, the
/// sensitivity or the exact null are asked for, the probes' input checks). Throws InputError.
void validate_full_audit(const std::vector<AuditRunInput>& runs, const FullAuditOptions& options);

/// validate_full_audit, run_audit, then run_probe_family / run_sensitivity_audit /
/// run_exact_null_audit as asked. LibTorch's and OpenBLAS's thread counts are set to 1 for the MLP
/// fits (their parallelism is one fit per worker) and restored afterwards.
AuditResults run_full_audit(const std::vector<AuditRunInput>& runs, const FullAuditOptions& options);

}  // namespace arcal
