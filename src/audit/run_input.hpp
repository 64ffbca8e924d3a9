// One run's audit input from a loaded trace: confidence, correctness, predictive entropy, the named
// statistics, and the probe inputs (entropy profile or feature columns, class-ordered log-probabilities and
// the predicted class). Shared
// by `arcal audit` and the tests so that both derive the audit's columns the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "audit/audit.hpp"
#include "io/trace.hpp"

namespace arcal {

/// Lower bound of the audit's log-probabilities (a probability of exactly 0 in a trace of probabilities).
inline constexpr double kLogProbFloor = -100.0;

/// Above this many classes (or for a trace in the top-k form) the audit reads the outputs in the reduced
/// form (issue 53): the predicted class as one of kAuditClassGroups groups (the kAuditClassGroups - 1
/// most-predicted classes, the rest pooled) and the kAuditTopLogProbs largest log-probabilities with the
/// log of the remaining mass, instead of 4K columns (K = 32,000 would be 128,000 probe inputs). At or
/// below it the whole vector is read, as before.
inline constexpr std::size_t kAuditFullOutputClasses = 256;
inline constexpr std::size_t kAuditClassGroups = 32;
inline constexpr std::size_t kAuditTopLogProbs = 32;
/// Cluster-bootstrap resamples of the expert view (audit/experts.hpp) that make_audit_run_input makes for a
/// mixture-of-experts trace (seed 0, 15 bins).
inline constexpr int kExpertViewDraws = 200;

/// Cell of a trace: model/residual/block_size/dataset/split from its meta JSON (runs of one cell
/// differ only by seed), or `fallback` when the meta does not name a model or names it blank.
std::string trace_cell(const Trace& trace, const std::string& fallback);

/// Builds the AuditRunInput of `trace` (run id `run`). Confidence = max probability (ties: lowest
/// class), correct = argmax == label, predictive entropy in nats. Profile (method.md §3): the entropies
/// H_p at the points with S_p > 1 (names "H_<p>") when the trace has routing; otherwise the columns
/// of `stats`. Throws InputError (from statistic_column) on an unknown statistic.
AuditRunInput make_audit_run_input(const Trace& trace, const std::string& run, const std::vector<std::string>& stats);

/// The run restricted to a seeded uniform subsample of at most `max_examples` examples (without
/// replacement, in their original order): every per-example array (confidence, correctness, entropy,
/// labels, statistics, profile, log-probabilities, predicted class) is subset together; the run-level
/// fields (ids, cell, classes, names, routing means) are kept. A run with clusters is subsampled by
/// whole clusters (a seeded order of them, taken while the total stays within max_examples; at least
/// one). A run of at most max_examples examples,
/// or max_examples = 0, is returned whole. The subsample ignores routing and correctness, so the
/// refits' nulls (method.md §6.5-6.6) hold on it as on the whole run; it only costs power.
AuditRunInput subsample_run(const AuditRunInput& run, std::size_t max_examples, std::uint64_t seed);

}  // namespace arcal
