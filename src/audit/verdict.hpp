// The audit's one answer (method.md §6.8 "The verdict"): does routing carry calibration-relevant information beyond
// confidence in these runs? A decision chain declared before running, over the typed results:
// (1) dependence — the exact null's confidence variant when it ran, else the diagnostic's decision family
// (Holm) — at full alpha; (2) the gain of the full-vector probe over its capacity-matched control with its
// 95 % interval (across runs Hartung-Knapp, one run its split test), read against the smallest effect of
// interest delta; (3) only if (1) rejects, "beyond the whole output vector" (the exact null's full_logit
// variant, else the full-logit probe comparison) at full alpha. Secondary comparisons (shuffled, linear,
// predictive entropy) form their own Holm family and never change the answer. Standard library only;
// results/verdict.hpp holds its JSON.
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "stats/bootstrap.hpp"

namespace arcal {

struct AuditResults;

/// The default smallest effect of interest delta, in nats of binary log-loss gain (docs/method.md §6.8 "The verdict"):
/// half the seed papers' 0.010-nat reference effect, and one of the sensitivity audit's injected effects,
/// so "would the audit have seen delta" is measured at delta itself.
inline constexpr double kDefaultSmallestEffect = 0.005;

/// One link of the chain or one secondary comparison: which test, on what, its gain and p.
struct VerdictEvidence {
  std::string
      test;  ///< "exact_null.conditional_permutation", "diagnostic.decision", "probes.across_runs"; empty: not run
  std::string comparison;  ///< e.g. "full_vector_vs_capacity_matched" (diagnostic: the statistic of the smallest p)
  std::string variant;     ///< exact null: "confidence" or "full_logit"
  /// Gain in nats, ℓ(control) − ℓ(probe) (positive: routing helps; the sign of every gain in results.json);
  /// for the diagnostic the decision test's G_r of the smallest p (accuracy units).
  double effect = std::numeric_limits<double>::quiet_NaN();
  Interval effect_ci{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  double p = std::numeric_limits<double>::quiet_NaN();       ///< the p that decides (Holm-adjusted for the diagnostic)
  double p_holm = std::numeric_limits<double>::quiet_NaN();  ///< secondary comparisons: Holm within their family
  std::size_t runs = 0;
  /// "rejects", "does not reject", "not reached" (the chain stopped before it), "not run".
  std::string status = "not run";
};

struct Verdict {
  /// "present" (dependence, and a gain interval above 0 that reaches delta), "negligible" (the whole gain
  /// interval below delta, with or without dependence: dependence.status says which; unless the
  /// sensitivity audit ran and an effect of delta could show as a gain inside the interval, R_low delta
  /// <= hi: then "undetected"), "absent" (no
  /// dependence, the interval reaches delta, and the sensitivity audit would have seen delta), "undetected"
  /// (the interval reaches delta but neither dependence with a gain above 0 nor power to call it absent),
  /// "not assessed" (no gain was measured, or no test ran).
  std::string answer;
  std::string summary;  ///< one to three sentences naming every test the answer rests on
  double alpha = 0.05;
  double smallest_effect = kDefaultSmallestEffect;  ///< delta [nats]
  VerdictEvidence dependence;                       ///< link (1)
  VerdictEvidence primary;                          ///< link (2): the gain and its interval the answer rests on
  VerdictEvidence beyond_outputs;                   ///< link (3)
  std::vector<VerdictEvidence> secondary;           ///< their own Holm family, never a veto
  /// Sensitivity: recovery R of the full-vector probe at `sensitivity_effect`, the largest injected effect
  /// <= delta (NaN when the audit did not run or injected nothing that small).
  double sensitivity_effect = std::numeric_limits<double>::quiet_NaN();
  double recovery = std::numeric_limits<double>::quiet_NaN();
  Interval recovery_ci{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
  double threshold = std::numeric_limits<double>::quiet_NaN();
  /// The same for the injection confined to one class (each run's most frequent predicted class) at
  /// the largest such effect <= delta (NaN when none ran): reported in the words, never the answer.
  double class_effect = std::numeric_limits<double>::quiet_NaN();
  double class_recovery = std::numeric_limits<double>::quiet_NaN();
  Interval class_recovery_ci{std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()};
};

/// The chain over typed results. alpha and delta come from results.options (diagnostic.alpha,
/// smallest_effect). Pure: the same results give the same verdict.
Verdict make_verdict(const AuditResults& results);

}  // namespace arcal
