// The whole audit of `arcal audit` as one library call: the diagnostic family and AR-CondCal
// (audit/audit.hpp), then the MLP probes, the sensitivity audit and the exact-null audit when asked.
// The CLI and the Python module's arcal.audit both call it with the same options, so both compute
// the same results.json (audit_results_json of what it returns).
#pragma once

#include <string>
#include <vector>

#include "audit/audit.hpp"
#include "audit/audit_options.hpp"

namespace arcal {

/// Checks the runs and options as a whole before any computation (the audit's and, when probes, the
/// sensitivity or the exact null are asked for, the probes' input checks). Throws InputError.
void validate_full_audit(const std::vector<AuditRunInput>& runs, const FullAuditOptions& options);

/// validate_full_audit, run_audit, then run_probe_family / run_sensitivity_audit /
/// run_exact_null_audit as asked. LibTorch's and OpenBLAS's thread counts are set to 1 for the MLP
/// fits (their parallelism is one fit per worker) and restored afterwards. runs is taken by value (the
/// integrity step edits it): callers that no longer need theirs move it in, saving a copy of every run.
AuditResults run_full_audit(std::vector<AuditRunInput> runs, const FullAuditOptions& options);

}  // namespace arcal
