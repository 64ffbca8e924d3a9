// The one JSON form of every audit result (results.json, schema "arcal.audit/3", docs/schema/
// audit.schema.json): to_json and from_json for each result struct, found by nlohmann's ADL, so
// `nlohmann::json j = results` writes and `j.get<AuditResults>()` reads. Key paths are those of
// arcal.audit/1 (diagnostic.tests[], probes.tests[], exact_null.runs[], sensitivity, condcal, runs[]);
// version 2 added `verdict`, the reliability rows' consistency band and the pooled null
// (exact_null.pooled[].null_mean_gain) (docs/interface.md). Constant
// description strings (the tests' definitions) are written for readers and ignored when read; counts
// that follow from arrays ("runs" of an across-run test, "bins_used") likewise. Inline and written
// against `nlohmann::json`, so a reader compiled with JSON_DIAGNOSTICS gets its own copies and errors
// that name the JSON pointer (see json_fields.hpp).
#pragma once

#include <nlohmann/json.hpp>

#include "audit/audit.hpp"
#include "results/audit_json_runs.hpp"
#include "results/json_fields.hpp"
#include "results/verdict.hpp"

namespace arcal {

// ---------------------------------------------------------------- probes

// Probe comparisons are written as gains, ℓ(control) − ℓ(probe) (positive: the probe is better), the one
// sign of every gain in results.json (the exact null, the sensitivity audit, the verdict); the structs
// keep Δ = probe − control, so the JSON pair negates (and an interval swaps its ends).
inline std::vector<double> negated(std::vector<double> v) {
  for (auto& x : v) x = -x;
  return v;
}
inline Interval negated(const Interval& ci) { return {-ci.high, -ci.low}; }

inline void to_json(nlohmann::json& j, const MetricDelta& d) {
  j = {{"gain", -d.delta},
       {"ci", results::interval_json(negated(d.ci))},
       {"se", d.se},
       {"p", d.p},
       {"split_gains", negated(d.split_deltas)}};
}
inline void from_json(const nlohmann::json& j, MetricDelta& d) {
  results::get_number(j, "gain", d.delta);
  d.delta = -d.delta;
  results::get_interval(j, "ci", d.ci);
  d.ci = negated(d.ci);
  results::get_number(j, "se", d.se);
  results::get_number(j, "p", d.p);
  results::get_numbers(j, "split_gains", d.split_deltas);
  d.split_deltas = negated(std::move(d.split_deltas));
}
inline void to_json(nlohmann::json& j, const RunComparison& c) {
  j = {{"name", c.name},         {"probe", c.probe}, {"control", c.control},
       {"log_loss", c.log_loss}, {"brier", c.brier}, {"ece", c.ece}};
}
inline void from_json(const nlohmann::json& j, RunComparison& c) {
  results::get_to(j, "name", c.name);
  results::get_to(j, "probe", c.probe);
  results::get_to(j, "control", c.control);
  results::get_to(j, "log_loss", c.log_loss);
  results::get_to(j, "brier", c.brier);
  results::get_to(j, "ece", c.ece);
}
inline void to_json(nlohmann::json& j, const RunProbeResult& r) {
  nlohmann::json probes = nlohmann::json::object();
  for (const auto& p : r.probes)
    probes[p.name] = {{"log_loss", p.scores.log_loss}, {"brier", p.scores.brier}, {"ece", p.scores.ece},
                      {"parameters", p.parameters},    {"inputs", p.inputs},      {"hidden", {p.hidden1, p.hidden2}},
                      {"mean_epochs", p.mean_epochs}};
  j = {{"run", r.run},     {"cell", r.cell},
       {"n", r.n},         {"profile", r.profile_names},
       {"probes", probes}, {"comparisons", r.comparisons}};
}
inline void from_json(const nlohmann::json& j, RunProbeResult& r) {
  results::get_to(j, "run", r.run);
  results::get_to(j, "cell", r.cell);
  results::get_to(j, "n", r.n);
  results::get_to(j, "profile", r.profile_names);
  r.probes.clear();
  for (const auto& [name, p] : results::object_at(j, "probes").items()) {
    ProbeFit f;
    f.name = name;
    results::get_number(p, "log_loss", f.scores.log_loss);
    results::get_number(p, "brier", f.scores.brier);
    results::get_number(p, "ece", f.scores.ece);
    results::get_to(p, "parameters", f.parameters);
    results::get_to(p, "inputs", f.inputs);
    const auto& hidden = results::array_at(p, "hidden");
    if (hidden.size() != 2) throw nlohmann::json::type_error::create(302, "hidden must be [h1, h2]", &hidden);
    f.hidden1 = results::integer_value<int>(hidden[0]);
    f.hidden2 = results::integer_value<int>(hidden[1]);
    results::get_number(p, "mean_epochs", f.mean_epochs);
    r.probes.push_back(f);
  }
  results::get_to(j, "comparisons", r.comparisons);
}
inline void to_json(nlohmann::json& j, const AcrossRunTest& t) {
  j = {{"comparison", t.comparison},
       {"metric", t.metric},
       {"runs", t.deltas.size()},
       {"gains", negated(t.deltas)},
       {"variances", t.variances},
       {"mean_gain", -t.mean_delta},
       {"plain_mean_gain", -t.plain_mean},
       {"ci", results::interval_json(negated(t.ci))},
       {"p", t.p},
       {"tau2", t.tau2},
       {"p_wilcoxon", t.p_wilcoxon},
       {"p_sign", t.p_sign},
       {"p_rank_min", t.p_rank_min},
       {"p_holm", t.p_holm},
       {"detectable_gain", results::number_or_null(t.detectable)},
       {"runs_better", t.runs_better},
       {"runs_worse", t.runs_worse},
       {"verdict", t.verdict},
       {"power_note", t.power_note}};
}
inline void from_json(const nlohmann::json& j, AcrossRunTest& t) {
  results::get_to(j, "comparison", t.comparison);
  results::get_to(j, "metric", t.metric);
  results::get_numbers(j, "gains", t.deltas);
  t.deltas = negated(std::move(t.deltas));
  results::get_numbers(j, "variances", t.variances);
  results::get_number(j, "mean_gain", t.mean_delta);
  t.mean_delta = -t.mean_delta;
  results::get_number(j, "plain_mean_gain", t.plain_mean);
  t.plain_mean = -t.plain_mean;
  results::get_interval(j, "ci", t.ci);
  t.ci = negated(t.ci);
  results::get_number(j, "p", t.p);
  results::get_number(j, "tau2", t.tau2);
  results::get_number(j, "p_wilcoxon", t.p_wilcoxon);
  results::get_number(j, "p_sign", t.p_sign);
  results::get_number(j, "p_rank_min", t.p_rank_min);
  results::get_number(j, "p_holm", t.p_holm);
  results::get_number(j, "detectable_gain", t.detectable);
  results::get_to(j, "runs_better", t.runs_better);
  results::get_to(j, "runs_worse", t.runs_worse);
  results::get_to(j, "verdict", t.verdict);
  results::get_to(j, "power_note", t.power_note);
}
inline void to_json(nlohmann::json& j, const ProbeFamily& f) {
  j = {{"gain", "l(control) - l(probe) of each metric (positive: the probe is better), as every gain in this file"},
       {"per_run_test",
        "mean over 2 x repeats cross-fit splits of the split-level delta; Nadeau-Bengio corrected variance "
        "(1/(2J) + n_eval/n_fit) S^2; t interval and p on 2J - 1 df"},
       {"across_run_test",
        "random effects (Paule-Mandel tau^2, Hartung-Knapp t interval on runs - 1 df); Holm over the "
        "comparison x metric family on p; Wilcoxon and sign tests shown with their smallest attainable p"},
       {"repeats", f.repeats},
       {"restarts", f.restarts},
       {"max_epochs", f.max_epochs},
       {"patience", f.patience},
       {"batch_size", f.batch_size},
       {"lr", f.lr},
       {"weight_decay", f.weight_decay},
       {"inner_val", f.inner_val},
       {"shuffle_bins", f.shuffle_bins},
       {"ece_bins", f.ece_bins},
       {"alpha", f.alpha},
       {"seed", f.seed},
       {"seconds", f.seconds},
       {"family_size", f.tests.size()},
       {"runs", f.runs},
       {"tests", f.tests}};
}
inline void from_json(const nlohmann::json& j, ProbeFamily& f) {
  results::get_to(j, "repeats", f.repeats);
  results::get_to(j, "restarts", f.restarts);
  results::get_to(j, "max_epochs", f.max_epochs);
  results::get_to(j, "patience", f.patience);
  results::get_to(j, "batch_size", f.batch_size);
  results::get_number(j, "lr", f.lr);
  results::get_number(j, "weight_decay", f.weight_decay);
  results::get_number(j, "inner_val", f.inner_val);
  results::get_to(j, "shuffle_bins", f.shuffle_bins);
  results::get_to(j, "ece_bins", f.ece_bins);
  results::get_number(j, "alpha", f.alpha);
  results::get_to(j, "seed", f.seed);
  results::get_number(j, "seconds", f.seconds);
  results::get_to(j, "runs", f.runs);
  results::get_to(j, "tests", f.tests);
}

// ---------------------------------------------------------------- sensitivity

inline void to_json(nlohmann::json& j, const SensitivityEffect& e) {
  nlohmann::json probes = nlohmann::json::object();
  for (const auto& p : e.probes) {
    nlohmann::json one = {
        {"gain", p.gain}, {"gain_ci", results::interval_json(p.gain_ci)}, {"mean_epochs", p.mean_epochs}};
    one["recovery"] = p.has_recovery ? results::number_or_null(p.recovery) : nlohmann::json(nullptr);
    one["recovery_ci"] = p.has_recovery ? results::interval_json(p.recovery_ci) : nlohmann::json(nullptr);
    probes[p.probe] = one;
  }
  j = {{"effect_nats", e.effect_nats},
       {"kind", e.kind},
       {"delta", e.delta},
       {"oracle_gain", e.oracle_gain},
       {"correction_ridge", e.correction_ridge},
       {"mean_oracle_loss_gain", e.mean_oracle_loss_gain},
       {"probes", probes}};
  if (!e.classes.empty()) j["classes"] = e.classes;
}
inline void from_json(const nlohmann::json& j, SensitivityEffect& e) {
  results::get_number(j, "effect_nats", e.effect_nats);
  if (j.contains("kind")) results::get_to(j, "kind", e.kind);
  if (j.contains("classes")) results::get_to(j, "classes", e.classes);
  results::get_numbers(j, "delta", e.delta);
  results::get_numbers(j, "oracle_gain", e.oracle_gain);
  results::get_number(j, "correction_ridge", e.correction_ridge);
  results::get_number(j, "mean_oracle_loss_gain", e.mean_oracle_loss_gain);
  e.probes.clear();
  for (const auto& [name, p] : results::object_at(j, "probes").items()) {
    RecoveryEstimate r;
    r.probe = name;
    results::get_number(p, "gain", r.gain);
    results::get_interval(p, "gain_ci", r.gain_ci);
    results::get_number(p, "mean_epochs", r.mean_epochs);
    r.has_recovery = !p.at("recovery").is_null();
    if (r.has_recovery) {
      results::get_number(p, "recovery", r.recovery);
      results::get_interval(p, "recovery_ci", r.recovery_ci);
    }
    e.probes.push_back(r);
  }
}
inline void to_json(nlohmann::json& j, const SensitivityVerdict& v) {
  j = {{"probe", v.probe},
       {"recovery", results::number_or_null(v.recovery)},
       {"recovery_ci", results::interval_json(v.recovery_ci)},
       {"verdict", v.verdict}};
}
inline void from_json(const nlohmann::json& j, SensitivityVerdict& v) {
  results::get_to(j, "probe", v.probe);
  results::get_number(j, "recovery", v.recovery);
  results::get_interval(j, "recovery_ci", v.recovery_ci);
  results::get_to(j, "verdict", v.verdict);
}
inline void to_json(nlohmann::json& j, const SensitivityResult& s) {
  j = {{"runs", s.runs},
       {"statistic", s.statistic},
       {"effects", s.effects},
       {"class_effects", s.class_effects},
       {"draws", s.draws},
       {"bootstrap_draws", s.bootstrap_draws},
       {"threshold", s.threshold},
       {"threshold_effect", s.threshold_effect},
       {"correction_ridge", s.correction_ridge},
       {"correction_basis",
        "g(z) = b0 + b1 u + b2 u^2 + b3 u^3, u = clamp(z, -3, 3)/3, ridge on every b, Newton; "
        "ridge from 5-fold inner CV over {0, 0.1, 1, 10, 100, 1000} when correction_ridge < 0"},
       {"verdict_rule", "absent when the lower end of R's 95 % interval at threshold_effect reaches threshold"},
       {"reference",
        "1-D Nadaraya-Watson on logit c, Scott bandwidth n^(-1/5), fitted per cross-fit fold on the calibration half"},
       {"recovery",
        "sum over (run, draw) of (l(q) - l(probe)) / sum of (l(q) - l(p*)); l = fold-mean log-loss on the evaluation "
        "halves"},
       {"seed", s.seed},
       {"refit", s.refit},
       {"seconds", s.seconds},
       {"by_effect", s.by_effect},
       {"verdicts", s.verdicts}};
}
inline void from_json(const nlohmann::json& j, SensitivityResult& s) {
  results::get_to(j, "runs", s.runs);
  results::get_to(j, "statistic", s.statistic);
  results::get_numbers(j, "effects", s.effects);
  if (j.contains("class_effects")) results::get_numbers(j, "class_effects", s.class_effects);
  results::get_to(j, "draws", s.draws);
  results::get_to(j, "bootstrap_draws", s.bootstrap_draws);
  results::get_number(j, "threshold", s.threshold);
  results::get_number(j, "threshold_effect", s.threshold_effect);
  results::get_number(j, "correction_ridge", s.correction_ridge);
  results::get_to(j, "seed", s.seed);
  results::get_to(j, "refit", s.refit);
  results::get_number(j, "seconds", s.seconds);
  results::get_to(j, "by_effect", s.by_effect);
  results::get_to(j, "verdicts", s.verdicts);
}

// ---------------------------------------------------------------- exact null

inline void to_json(nlohmann::json& j, const ExactNullComparison& c) {
  j = {{"comparison", c.comparison},
       {"probe", c.probe},
       {"control", c.control},
       {"real_gain", c.real_gain},
       {"null_mean", c.null_mean},
       {"null_q95", c.null_q95},
       {"p", c.p},
       {"null_gain", c.null_gain}};
}
inline void from_json(const nlohmann::json& j, ExactNullComparison& c) {
  results::get_to(j, "comparison", c.comparison);
  results::get_to(j, "probe", c.probe);
  results::get_to(j, "control", c.control);
  results::get_number(j, "real_gain", c.real_gain);
  results::get_number(j, "null_mean", c.null_mean);
  results::get_number(j, "null_q95", c.null_q95);
  results::get_number(j, "p", c.p);
  results::get_numbers(j, "null_gain", c.null_gain);
}
inline void to_json(nlohmann::json& j, const ExactNullPooled& p) {
  j = {{"variant", p.variant},
       {"comparison", p.comparison},
       {"runs", p.runs},
       {"replicates", p.replicates},
       {"real_mean_gain", p.real_mean_gain},
       {"null_mean", p.null_mean},
       {"null_q95", p.null_q95},
       {"p", p.p},
       {"null_mean_gain", p.null_mean_gain}};
}
inline void from_json(const nlohmann::json& j, ExactNullPooled& p) {
  results::get_to(j, "variant", p.variant);
  results::get_to(j, "comparison", p.comparison);
  results::get_to(j, "runs", p.runs);
  if (j.contains("replicates"))
    results::get_to(j, "replicates", p.replicates);  // absent before sequential stopping
  else
    p.replicates = j.at("null_mean_gain").size();
  results::get_number(j, "real_mean_gain", p.real_mean_gain);
  results::get_number(j, "null_mean", p.null_mean);
  results::get_number(j, "null_q95", p.null_q95);
  results::get_number(j, "p", p.p);
  results::get_numbers(j, "null_mean_gain", p.null_mean_gain);
}
/// One run of the conditional (matching) or the model-based (reference_fit) null.
inline nlohmann::json exact_null_run_json(const ExactNullRun& r, bool conditional) {
  nlohmann::json one = {{"run", r.run}, {"variant", r.variant}, {"comparisons", r.comparisons}};
  if (conditional)
    one["matching"] = {{"space", r.matching.space},
                       {"group_size", r.matching.group_size},
                       {"groups", r.matching.groups},
                       {"mean_distance", r.matching.mean_distance},
                       {"random_pair_distance", r.matching.random_pair_distance}};
  else
    one["reference_fit"] = {{"test", "Hosmer-Lemeshow over deciles of the reference on held-out halves"},
                            {"statistic", r.reference_fit.statistic},
                            {"df", r.reference_fit.df},
                            {"p", r.reference_fit.p}};
  return one;
}
inline ExactNullRun exact_null_run_from_json(const nlohmann::json& j, bool conditional) {
  ExactNullRun r;
  results::get_to(j, "run", r.run);
  results::get_to(j, "variant", r.variant);
  results::get_to(j, "comparisons", r.comparisons);
  if (conditional) {
    const auto& m = j.at("matching");
    results::get_to(m, "space", r.matching.space);
    results::get_to(m, "group_size", r.matching.group_size);
    results::get_to(m, "groups", r.matching.groups);
    results::get_number(m, "mean_distance", r.matching.mean_distance);
    results::get_number(m, "random_pair_distance", r.matching.random_pair_distance);
  } else {
    const auto& f = j.at("reference_fit");
    results::get_number(f, "statistic", r.reference_fit.statistic);
    results::get_number(f, "df", r.reference_fit.df);
    results::get_number(f, "p", r.reference_fit.p);
  }
  return r;
}
inline void to_json(nlohmann::json& j, const ExactNullResult& x) {
  nlohmann::json runs = nlohmann::json::array(), model_runs = nlohmann::json::array();
  for (const auto& r : x.runs) runs.push_back(exact_null_run_json(r, true));
  for (const auto& r : x.model_runs) model_runs.push_back(exact_null_run_json(r, false));
  j = {{"null",
        "conditional permutation (the decision): the routing profile permuted within matched groups of "
        "examples with nearly identical outputs (variant confidence: logit c; full_logit: what the sorted "
        "probabilities predict about the routing profile, a balancing score), real labels, every profile-reading "
        "probe refitted from the same cold start"},
       {"gain", "l(control) - l(probe), fold-mean log-loss (positive: the probe is better)"},
       {"p", x.stop_after > 0
                 ? "sequential (Besag-Clifford): h / L if the h-th null gain >= real gain came at replicate L "
                   "(h = stop_after), else (1 + #{null gain >= real gain}) / (replicates drawn + 1)"
                 : "(1 + #{null gain >= real gain}) / (replicates + 1)"},
       {"variants", x.variants},
       {"replicates", x.replicates},
       {"stop_after", x.stop_after},
       {"group_size", x.group_size},
       {"seed", x.seed},
       {"refit", x.refit},
       {"seconds", x.seconds},
       {"runs", runs},
       {"pooled", x.pooled}};
  if (x.has_model_based)
    j["model_based"] = {{"null",
                         "labels drawn from a fitted reference (confidence: 1-D Nadaraya-Watson on logit c; "
                         "full_logit: the full-logit MLP); valid only if the reference is right, see each run's "
                         "reference_fit; not the decision"},
                        {"runs", model_runs},
                        {"pooled", x.model_pooled}};
}
inline void from_json(const nlohmann::json& j, ExactNullResult& x) {
  results::get_to(j, "variants", x.variants);
  results::get_to(j, "replicates", x.replicates);
  if (j.contains("stop_after")) results::get_to(j, "stop_after", x.stop_after);  // absent before sequential stopping
  results::get_to(j, "group_size", x.group_size);
  results::get_to(j, "seed", x.seed);
  results::get_to(j, "refit", x.refit);
  results::get_number(j, "seconds", x.seconds);
  x.runs.clear();
  for (const auto& r : results::array_at(j, "runs")) x.runs.push_back(exact_null_run_from_json(r, true));
  results::get_to(j, "pooled", x.pooled);
  x.has_model_based = j.contains("model_based");
  x.model_runs.clear();
  x.model_pooled.clear();
  if (x.has_model_based) {
    const auto& m = j.at("model_based");
    for (const auto& r : results::array_at(m, "runs")) x.model_runs.push_back(exact_null_run_from_json(r, false));
    results::get_to(m, "pooled", x.model_pooled);
  }
}

// ---------------------------------------------------------------- the whole audit

inline void to_json(nlohmann::json& j, const RunIntegrity& r) {
  j = {{"run", r.run},
       {"rows", r.rows},
       {"duplicate_rows", r.duplicate_rows},
       {"near_duplicate_rows", r.near_duplicate_rows},
       {"duplicates_dropped", r.duplicates_dropped},
       {"dropped_profile", r.dropped_profile},
       {"dropped_statistics", r.dropped_statistics}};
}
inline void from_json(const nlohmann::json& j, RunIntegrity& r) {
  results::get_to(j, "run", r.run);
  results::get_to(j, "rows", r.rows);
  results::get_to(j, "duplicate_rows", r.duplicate_rows);
  if (j.contains("near_duplicate_rows")) results::get_to(j, "near_duplicate_rows", r.near_duplicate_rows);
  results::get_to(j, "duplicates_dropped", r.duplicates_dropped);
  results::get_to(j, "dropped_profile", r.dropped_profile);
  results::get_to(j, "dropped_statistics", r.dropped_statistics);
}
inline void to_json(nlohmann::json& j, const RunOverlap& o) {
  j = {{"run_a", o.run_a},
       {"run_b", o.run_b},
       {"shared_rows", o.shared},
       {"smaller_rows", o.smaller},
       {"share", o.smaller > 0 ? double(o.shared) / double(o.smaller) : 0.0}};
}
inline void from_json(const nlohmann::json& j, RunOverlap& o) {
  results::get_to(j, "run_a", o.run_a);
  results::get_to(j, "run_b", o.run_b);
  results::get_to(j, "shared_rows", o.shared);
  results::get_to(j, "smaller_rows", o.smaller);
}
inline void to_json(nlohmann::json& j, const IntegrityResult& x) {
  j = {{"drop_duplicates", x.drop_duplicates}, {"runs", x.runs}, {"overlaps", x.overlaps}, {"notes", x.notes}};
}
inline void from_json(const nlohmann::json& j, IntegrityResult& x) {
  results::get_to(j, "drop_duplicates", x.drop_duplicates);
  results::get_to(j, "runs", x.runs);
  if (j.contains("overlaps")) results::get_to(j, "overlaps", x.overlaps);
  results::get_to(j, "notes", x.notes);
}

inline void to_json(nlohmann::json& j, const AuditResults& res) {
  j = {{"schema", kAuditSchema},
       {"runs", res.run_summaries},
       {"integrity", res.integrity},
       {"diagnostic", res.diagnostic}};
  if (res.has_probes) j["probes"] = res.probes;
  if (res.has_sensitivity) j["sensitivity"] = res.sensitivity;
  if (res.has_exact_null) j["exact_null"] = res.exact_null;
  j["verdict"] = res.verdict;
  // Every option as the audit ran, generically from the table (issue 57).
  if (res.has_settings) j["options"] = options_json(audit_option_table(), res.settings);
  j["seconds"] = {{"diagnostic", results::number_or_null(res.diagnostic_seconds)},
                  {"condcal", results::number_or_null(res.condcal_seconds)}};
  if (!res.options.run_condcal) return;
  const auto& c = res.options.condcal;
  j["condcal"] = {
      {"multiples", c.multiples}, {"cv_folds", c.cv_folds}, {"ece_bins", c.ece_bins}, {"pseudo_count", c.pseudo_count},
      {"clip", c.clip},           {"seed", c.seed},         {"runs", res.condcal},    {"seed_band", res.seed_bands}};
}
/// Reads every section; the schema string is checked by the caller (results/read.hpp), which names
/// the file and the version.
inline void from_json(const nlohmann::json& j, AuditResults& res) {
  results::get_to(j, "runs", res.run_summaries);
  results::get_to(j, "integrity", res.integrity);
  results::get_to(j, "diagnostic", res.diagnostic);
  res.options.diagnostic = res.diagnostic.options;
  results::get_to(j, "verdict", res.verdict);
  res.options.smallest_effect = res.verdict.smallest_effect;
  res.has_settings = j.contains("options");  // absent in results.json before issue 57
  if (res.has_settings) options_from_json(audit_option_table(), j.at("options"), res.settings, "results.json options");
  res.has_probes = j.contains("probes");
  if (res.has_probes) results::get_to(j, "probes", res.probes);
  res.has_sensitivity = j.contains("sensitivity");
  if (res.has_sensitivity) results::get_to(j, "sensitivity", res.sensitivity);
  res.has_exact_null = j.contains("exact_null");
  if (res.has_exact_null) results::get_to(j, "exact_null", res.exact_null);
  if (const auto it = j.find("seconds"); it != j.end() && it->is_object()) {
    res.diagnostic_seconds = results::value_or(*it, "diagnostic", std::numeric_limits<double>::quiet_NaN());
    res.condcal_seconds = results::value_or(*it, "condcal", std::numeric_limits<double>::quiet_NaN());
  }
  res.options.run_condcal = j.contains("condcal");
  res.condcal.clear();
  res.seed_bands.clear();
  if (res.options.run_condcal) {
    const auto& c = j.at("condcal");
    auto& o = res.options.condcal;
    results::get_numbers(c, "multiples", o.multiples);
    results::get_to(c, "cv_folds", o.cv_folds);
    results::get_to(c, "ece_bins", o.ece_bins);
    results::get_number(c, "pseudo_count", o.pseudo_count);
    results::get_number(c, "clip", o.clip);
    results::get_to(c, "seed", o.seed);
    results::get_to(c, "runs", res.condcal);
    results::get_to(c, "seed_band", res.seed_bands);
  }
}

}  // namespace arcal
