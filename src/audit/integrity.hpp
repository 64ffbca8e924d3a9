// Data integrity before the audit (method.md §6.9 "Data integrity"): the tests assume independent examples and
// informative columns. Refuses two runs that are the same trace; counts duplicated rows inside a run
// (and removes them when asked); drops (near-)constant routing points, feature columns and statistics
// with a note naming them instead of aborting. Standard library only.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace arcal {

struct AuditRunInput;

/// A column is near-constant when fewer than max(kNearConstantMin, n / kNearConstantDivisor) examples differ
/// from its most common value (a routing point that is one-hot for all but 3 of 500 examples): too few
/// to estimate anything from, and a cross-fit half or inner split would often see it constant.
inline constexpr std::size_t kNearConstantMin = 10;
inline constexpr std::size_t kNearConstantDivisor = 200;

/// Two rows are near-copies (issue 54) when they have the same label (and cluster) and every column
/// (confidence, log-probabilities, routing profile, statistics) agrees within
/// kNearCopyTolerance * (the column's standard deviation + the larger magnitude): float noise, such as
/// two non-deterministic inference passes leave, and not a second draw.
inline constexpr double kNearCopyTolerance = 1e-5;

/// Runs sharing this percentage or more of the smaller run's rows are not independent seeds.
inline constexpr std::size_t kOverlapRefusePercent = 1;

struct RunIntegrity {
  std::string run;
  std::size_t rows = 0;                 ///< rows as given
  std::size_t duplicate_rows = 0;       ///< rows identical to an earlier row (label, outputs, routing, statistics)
  std::size_t near_duplicate_rows = 0;  ///< rows not identical to, but near-copies of, an earlier row
  bool duplicates_dropped = false;
  std::vector<std::string> dropped_profile;     ///< profile columns dropped (routing points or features)
  std::vector<std::string> dropped_statistics;  ///< statistics dropped from the diagnostic family
};

/// Rows of a later run that equal (or nearly copy) a row of an earlier one, in any order.
struct RunOverlap {
  std::string run_a, run_b;  ///< run_a earlier in the input
  std::size_t shared = 0;    ///< rows of the smaller run with a copy or near-copy in the other
  std::size_t smaller = 0;   ///< rows of the smaller run: share = shared / smaller
};

struct IntegrityResult {
  bool drop_duplicates = false;
  std::vector<RunIntegrity> runs;    ///< input order
  std::vector<RunOverlap> overlaps;  ///< every pair of runs sharing at least one row (below the refusal rule)
  std::vector<std::string> notes;    ///< one sentence per finding (empty: nothing found)
};

/// Checks (and, where the rules say so, edits) the runs in place. Throws InputError when two runs hold
/// the same labels, outputs and routing (naming both), when two runs share 1 % or more of the smaller
/// one's rows as copies or near-copies in any order (kOverlapRefusePercent), or when every statistic of
/// a run is dropped. Near-copies inside a run are counted apart from exact ones; drop_duplicates removes
/// both (the first row of each group stays).
/// A run whose every profile column is near-constant keeps its most varied one (the probes need one
/// column); a run whose profile is exactly constant throughout has no routing information and is refused.
IntegrityResult check_integrity(std::vector<AuditRunInput>& runs, bool drop_duplicates);

}  // namespace arcal
