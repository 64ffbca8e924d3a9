#include "results/verdict.hpp"

#include <fmt/format.h>

#include <cmath>

#include "audit/audit.hpp"

namespace arcal {

namespace {

const char* kHeadline = "full_vector_vs_capacity_matched";

std::string p_text(double p) { return p < 1e-3 ? fmt::format("{:.1e}", p) : fmt::format("{:.3f}", p); }
std::string gain_text(const VerdictEvidence& e) {
  std::string s = fmt::format("{:+.4f} nats", e.effect);
  if (std::isfinite(e.effect_ci.low)) s += fmt::format(" [{:+.4f}, {:+.4f}]", e.effect_ci.low, e.effect_ci.high);
  return s;
}

VerdictEvidence exact_null_evidence(const ExactNullResult& x, const std::string& variant) {
  VerdictEvidence e;
  for (const auto& p : x.pooled)
    if (p.variant == variant && p.comparison == kHeadline) {
      e.test = "exact_null.conditional_permutation";
      e.comparison = p.comparison;
      e.variant = variant;
      e.effect = p.real_mean_gain;
      e.p = p.p;
      e.runs = p.runs;
    }
  return e;
}

VerdictEvidence probe_evidence(const ProbeFamily& f) {
  VerdictEvidence e;
  for (const auto& t : f.tests)
    if (t.comparison == kHeadline && t.metric == "log_loss") {
      e.test = "probes.across_runs";
      e.comparison = t.comparison;
      e.effect = -t.mean_delta;  // delta = probe - control; the gain is its negative
      e.effect_ci = {-t.ci.high, -t.ci.low};
      e.p = t.p_holm;
      e.runs = t.deltas.size();
    }
  return e;
}

VerdictEvidence diagnostic_evidence(const DiagnosticFamily& d) {
  VerdictEvidence e;
  e.test = "diagnostic";
  for (const auto& t : d.tests)
    if (!(t.p_holm >= e.p)) {  // the smallest Holm p of the family (NaN start)
      e.p = t.p_holm;
      e.effect = t.result.gap;
      e.comparison = t.statistic;
    }
  e.runs = d.tests.size();
  return e;
}

std::string describe(const VerdictEvidence& e, int replicates) {
  if (e.test == "exact_null.conditional_permutation")
    return fmt::format("exact null over {} runs, routing permuted within groups of matched {}: full-vector probe vs "
                       "capacity-matched control, mean gain {}, p = {}{}",
                       e.runs, e.variant == "confidence" ? "confidence" : "outputs", gain_text(e), p_text(e.p),
                       replicates > 0 && e.p <= 1.0 / (replicates + 1) + 1e-12
                           ? fmt::format(" (the smallest p {} replicates allow)", replicates)
                           : "");
  if (e.test == "probes.across_runs")
    return fmt::format("full-vector probe vs capacity-matched control over {} runs: gain {}, Holm p = {}", e.runs,
                       gain_text(e), p_text(e.p));
  return fmt::format("matched-confidence diagnostic, smallest Holm p of {} tests = {} ({})", e.runs, p_text(e.p),
                     e.comparison);
}

}  // namespace

Verdict make_verdict(const AuditResults& r) {
  Verdict v;
  v.alpha = r.diagnostic.options.alpha;
  const int replicates = r.has_exact_null ? r.exact_null.replicates : 0;
  if (r.has_exact_null) {
    v.primary = exact_null_evidence(r.exact_null, "confidence");
    v.beyond_outputs = exact_null_evidence(r.exact_null, "full_logit");
  }
  if (r.has_probes) v.across_runs = probe_evidence(r.probes);
  if (v.primary.test.empty()) v.primary = r.has_probes && !v.across_runs.test.empty() ? v.across_runs : diagnostic_evidence(r.diagnostic);
  if (r.has_sensitivity) {
    v.threshold = r.sensitivity.threshold;
    v.threshold_effect = r.sensitivity.threshold_effect;
    for (const auto& s : r.sensitivity.verdicts)
      if (s.probe == "full_vector") {
        v.recovery = s.recovery;
        v.recovery_ci = s.recovery_ci;
      }
  }
  const bool present = std::isfinite(v.primary.p) && v.primary.p <= v.alpha;
  // A rejection whose probe still does not beat its capacity-matched control: routing depends on
  // correctness beyond confidence, but not usably (the exact null compares real and permuted routing
  // under the same probe, so it can reject while the gain over the control is <= 0).
  if (present && v.primary.test != "diagnostic" && !(v.primary.effect > 0)) {
    v.answer = "weak";
    v.summary = "Weakly: routing depends on correctness beyond confidence (" + describe(v.primary, replicates) +
                "), but the probe that reads it does not beat its capacity-matched control, so here it does not "
                "improve calibration.";
    if (v.primary.test != "probes.across_runs" && !v.across_runs.test.empty())
      v.summary += fmt::format(" Across runs: {}.", describe(v.across_runs, 0));
    if (!v.beyond_outputs.test.empty())
      v.summary += fmt::format(" Beyond the whole output vector (full_logit matching): p = {}.", p_text(v.beyond_outputs.p));
    return v;
  }
  if (present) {
    v.answer = "present";
    v.summary = "Yes: in these runs routing carries calibration-relevant information beyond confidence (" +
                describe(v.primary, replicates) + ").";
    if (v.primary.test != "probes.across_runs" && !v.across_runs.test.empty()) {
      if (v.across_runs.p <= v.alpha)
        v.summary += fmt::format(" The probe gain is confirmed across runs ({}).", describe(v.across_runs, 0));
      else
        v.summary += fmt::format(" Across {} runs it is not confirmed ({}), so it may not hold for other seeds.",
                                 v.across_runs.runs, describe(v.across_runs, 0));
    }
    if (!v.beyond_outputs.test.empty())
      v.summary += fmt::format(" Beyond the whole output vector (full_logit matching): p = {}.", p_text(v.beyond_outputs.p));
    return v;
  }
  const std::string no = std::isfinite(v.primary.p)
                             ? "No: routing adds no detected calibration-relevant information beyond confidence (" +
                                   describe(v.primary, replicates) + ")."
                             : "No test of routing beyond confidence ran.";
  if (!std::isfinite(v.recovery)) {
    v.answer = "not assessed";
    v.summary = no + " Whether that means absent or only undetected was not assessed (run the audit with --sensitivity).";
  } else if (std::isfinite(v.recovery_ci.low) && v.recovery_ci.low >= v.threshold) {
    v.answer = "absent";
    v.summary = no + fmt::format(" The audit would have seen an injected effect of {} nats (full-vector recovery R = "
                                 "{:.2f} [{:.2f}, {:.2f}], threshold {}), so an effect of that size is absent.",
                                 v.threshold_effect, v.recovery, v.recovery_ci.low, v.recovery_ci.high, v.threshold);
  } else {
    v.answer = "undetected";
    v.summary = no + fmt::format(" The audit recovers only R = {:.2f} [{:.2f}, {:.2f}] of an injected {} nats (threshold "
                                 "{}): read this as not detected, not as absent.",
                                 v.recovery, v.recovery_ci.low, v.recovery_ci.high, v.threshold_effect, v.threshold);
  }
  return v;
}

}  // namespace arcal
