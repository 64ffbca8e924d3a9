// One run's audit input from a loaded trace: confidence, correctness, predictive entropy, the named
// statistics, and the probe inputs (entropy profile or feature columns, class-ordered log-probabilities and
// the predicted class). Shared
// by `arcal audit` and the tests so that both derive the audit's columns the same way.
#pragma once

#include <string>
#include <vector>

#include "audit/audit.hpp"
#include "io/trace.hpp"

namespace arcal {

/// Lower bound of the audit's log-probabilities (a probability of exactly 0 in a trace of probabilities).
inline constexpr double kLogProbFloor = -100.0;

/// Cell of a trace: model/residual/block_size/dataset/split from its meta JSON (runs of one cell
/// differ only by seed), or `fallback` when the meta does not name a model or names it blank.
std::string trace_cell(const Trace& trace, const std::string& fallback);

/// Builds the AuditRunInput of `trace` (run id `run`). Confidence = max probability (ties: lowest
/// class), correct = argmax == label, predictive entropy in nats. Profile (method.md §3): the entropies
/// H_p at the points with S_p > 1 (names "H_<p>") when the trace has routing; otherwise the columns
/// of `stats`. Throws InputError (from statistic_column) on an unknown statistic.
AuditRunInput make_audit_run_input(const Trace& trace, const std::string& run, const std::vector<std::string>& stats);

}  // namespace arcal
