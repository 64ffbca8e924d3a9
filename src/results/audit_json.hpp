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
#include "results/json_fields.hpp"
#include "results/verdict.hpp"

namespace arcal {

// ---------------------------------------------------------------- shared pieces

inline void to_json(nlohmann::json& j, const RefitSettings& r) {
  j = {{"restarts", r.restarts},
       {"max_epochs", r.max_epochs},
       {"patience", r.patience},
       {"batch_size", r.batch_size},
       {"lr", r.lr},
       {"warm_start", r.warm_start},
       {"subsample", r.subsample},
       {"examples", r.examples}};
}
inline void from_json(const nlohmann::json& j, RefitSettings& r) {
  results::get_to(j, "restarts", r.restarts);
  results::get_to(j, "max_epochs", r.max_epochs);
  results::get_to(j, "patience", r.patience);
  results::get_to(j, "batch_size", r.batch_size);
  results::get_number(j, "lr", r.lr);
  results::get_to(j, "warm_start", r.warm_start);
  if (j.contains("subsample")) {  // absent before --refit-subsample: every example was refitted
    results::get_to(j, "subsample", r.subsample);
    r.examples.clear();
    for (const auto& e : results::array_at(j, "examples")) r.examples.push_back(results::integer_value<std::size_t>(e));
  }
}

// ---------------------------------------------------------------- run summaries

inline void to_json(nlohmann::json& j, const ReliabilityRow& r) {
  j = {{"bin", r.bin},
       {"n", r.n},
       {"confidence", results::number_or_null(r.confidence)},
       {"accuracy", results::number_or_null(r.accuracy)},
       {"band", results::interval_json({r.band_low, r.band_high})}};
}
inline void from_json(const nlohmann::json& j, ReliabilityRow& r) {
  results::get_to(j, "bin", r.bin);
  results::get_to(j, "n", r.n);
  results::get_number(j, "confidence", r.confidence);
  results::get_number(j, "accuracy", r.accuracy);
  Interval band;
  results::get_interval(j, "band", band);
  r.band_low = band.low;
  r.band_high = band.high;
}

inline void to_json(nlohmann::json& j, const ExpertRow& r) {
  j = {{"tokens", r.tokens},
       {"load", r.load},
       {"router_mean", r.router_mean},
       {"accuracy", results::number_or_null(r.accuracy)},
       {"accuracy_ci", results::interval_json(r.accuracy_ci)},
       {"mean_confidence", results::number_or_null(r.mean_confidence)},
       {"ece", results::number_or_null(r.ece)},
       {"ece_ci", results::interval_json(r.ece_ci)},
       {"gap", results::number_or_null(r.gap)},
       {"gap_ci", results::interval_json(r.gap_ci)}};
}
inline void from_json(const nlohmann::json& j, ExpertRow& r) {
  results::get_to(j, "tokens", r.tokens);
  results::get_number(j, "load", r.load);
  results::get_number(j, "router_mean", r.router_mean);
  results::get_number(j, "accuracy", r.accuracy);
  results::get_interval(j, "accuracy_ci", r.accuracy_ci);
  results::get_number(j, "mean_confidence", r.mean_confidence);
  results::get_number(j, "ece", r.ece);
  results::get_interval(j, "ece_ci", r.ece_ci);
  results::get_number(j, "gap", r.gap);
  results::get_interval(j, "gap_ci", r.gap_ci);
}
inline void to_json(nlohmann::json& j, const ExpertLayer& l) {
  j = {{"name", l.name},
       {"experts", l.experts},
       {"experts_per_token", l.experts_per_token},
       {"router_entropy", results::number_or_null(l.router_entropy)},
       {"router_entropy_ci", results::interval_json(l.router_entropy_ci)},
       {"rows", l.rows}};
}
inline void from_json(const nlohmann::json& j, ExpertLayer& l) {
  results::get_to(j, "name", l.name);
  results::get_to(j, "experts", l.experts);
  results::get_number(j, "experts_per_token", l.experts_per_token);
  results::get_number(j, "router_entropy", l.router_entropy);
  results::get_interval(j, "router_entropy_ci", l.router_entropy_ci);
  results::get_to(j, "rows", l.rows);
  if (l.rows.size() != l.experts)
    throw nlohmann::json::type_error::create(302, "experts: a layer needs one row per expert", &j);
}
inline void to_json(nlohmann::json& j, const ExpertView& v) {
  j = {{"n", v.n},       {"clusters", v.clusters}, {"bins", v.bins},       {"draws", v.draws},
       {"seed", v.seed}, {"level", v.level},       {"handled", v.handled}, {"layers", v.layers}};
}
inline void from_json(const nlohmann::json& j, ExpertView& v) {
  results::get_to(j, "n", v.n);
  results::get_to(j, "clusters", v.clusters);
  results::get_to(j, "bins", v.bins);
  results::get_to(j, "draws", v.draws);
  results::get_to(j, "seed", v.seed);
  results::get_number(j, "level", v.level);
  results::get_to(j, "handled", v.handled);
  if (v.handled != "selected" && v.handled != "argmax")
    throw nlohmann::json::type_error::create(302, "experts.handled must be 'selected' or 'argmax'", &j);
  results::get_to(j, "layers", v.layers);
}

inline void to_json(nlohmann::json& j, const RunSummary& s) {
  nlohmann::json tert = nlohmann::json::array();
  const char* names[3] = {"low", "middle", "high"};
  if (!s.tertile_statistic.empty())
    for (std::size_t g = 0; g < 3; ++g)
      tert.push_back({{"tertile", names[g]},
                      {"n", s.tertile_n[g]},
                      {"accuracy", results::number_or_null(s.tertile_accuracy[g])},
                      {"ece", results::number_or_null(s.tertile_ece[g])},
                      {"reliability", s.tertile_reliability[g]}});
  nlohmann::json routing = nullptr;
  if (!s.routing_mean.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (std::size_t p = 0; p < s.points; ++p)
      rows.push_back(std::vector<double>(s.routing_mean.begin() + long(p * s.sources),
                                         s.routing_mean.begin() + long((p + 1) * s.sources)));
    routing = {{"points", s.points}, {"sources", s.routing_sources}, {"mean", rows}};
  }
  j = {{"run", s.run},
       {"cell", s.cell},
       {"n", s.n},
       {"bins", s.bins},
       {"accuracy", s.accuracy},
       {"mean_confidence", s.mean_confidence},
       {"ece", s.ece},
       {"reliability", s.reliability},
       {"tertile_statistic", s.tertile_statistic},
       {"tertiles", tert},
       {"routing_mean", routing}};
  if (!s.outputs.empty()) j["outputs"] = s.outputs;
  j["class_explained"] = results::number_or_null(s.class_explained);
  if (s.experts) j["experts"] = *s.experts;
}
inline void from_json(const nlohmann::json& j, RunSummary& s) {
  results::get_to(j, "run", s.run);
  results::get_to(j, "cell", s.cell);
  if (j.contains("outputs")) results::get_to(j, "outputs", s.outputs);
  s.class_explained = std::numeric_limits<double>::quiet_NaN();
  if (j.contains("class_explained")) results::get_number(j, "class_explained", s.class_explained);
  s.experts.reset();
  if (j.contains("experts")) s.experts = j.at("experts").get<ExpertView>();
  results::get_to(j, "n", s.n);
  results::get_to(j, "bins", s.bins);
  results::get_number(j, "accuracy", s.accuracy);
  results::get_number(j, "mean_confidence", s.mean_confidence);
  results::get_number(j, "ece", s.ece);
  results::get_to(j, "reliability", s.reliability);
  results::get_to(j, "tertile_statistic", s.tertile_statistic);
  const auto& tert = j.at("tertiles");
  if (!tert.empty()) {
    if (!tert.is_array() || tert.size() != 3)
      throw nlohmann::json::type_error::create(302, "tertiles must hold low, middle and high", &tert);
    for (std::size_t g = 0; g < 3; ++g) {
      results::get_to(tert[g], "n", s.tertile_n[g]);
      results::get_number(tert[g], "accuracy", s.tertile_accuracy[g]);
      results::get_number(tert[g], "ece", s.tertile_ece[g]);
      results::get_to(tert[g], "reliability", s.tertile_reliability[g]);
    }
  }
  const auto& rm = j.at("routing_mean");
  s.points = s.sources = 0;
  s.routing_sources.clear();
  s.routing_mean.clear();
  if (!rm.is_null()) {
    results::get_to(rm, "points", s.points);
    results::get_to(rm, "sources", s.routing_sources);
    const auto& mean = results::array_at(rm, "mean");
    for (const auto& row : mean) s.sources = std::max(s.sources, row.size());
    if (mean.size() != s.points || s.routing_sources.size() != s.points)
      throw nlohmann::json::type_error::create(302, "routing_mean: mean and sources must have one row per point", &rm);
    for (const auto& row : mean) {
      if (row.size() != s.sources)
        throw nlohmann::json::type_error::create(302, "routing_mean: every row must have the same length", &row);
      for (const auto& x : row) s.routing_mean.push_back(x.is_null() ? std::nan("") : x.get<double>());
    }
  }
}

// ---------------------------------------------------------------- diagnostic

inline nlohmann::json bins_json(const GapTestResult& r, bool residuals) {
  nlohmann::json bins = nlohmann::json::array();
  for (const auto& b : r.bins) {
    nlohmann::json one = {{"bin", b.bin},
                          {"n", b.n},
                          {"n_top", b.n_top},
                          {"n_bottom", b.n_bottom},
                          {"acc_top", b.acc_top},
                          {"conf_top", b.conf_top},
                          {"acc_bottom", b.acc_bottom},
                          {"conf_bottom", b.conf_bottom},
                          {"gap", b.gap},
                          {"weight", b.weight}};
    if (residuals) {
      one["resid_top"] = b.resid_top;
      one["resid_bottom"] = b.resid_bottom;
    }
    bins.push_back(one);
  }
  return bins;
}
inline void bins_from_json(const nlohmann::json& j, GapTestResult& r) {
  r.bins.clear();
  for (const auto& b : results::array_at(j, "bins")) {
    BinGap g;
    results::get_to(b, "bin", g.bin);
    results::get_to(b, "n", g.n);
    results::get_to(b, "n_top", g.n_top);
    results::get_to(b, "n_bottom", g.n_bottom);
    results::get_number(b, "acc_top", g.acc_top);
    results::get_number(b, "conf_top", g.conf_top);
    results::get_number(b, "acc_bottom", g.acc_bottom);
    results::get_number(b, "conf_bottom", g.conf_bottom);
    results::get_number(b, "gap", g.gap);
    results::get_number(b, "weight", g.weight);
    g.resid_top = results::value_or(b, "resid_top", 0.0);
    g.resid_bottom = results::value_or(b, "resid_bottom", 0.0);
    r.bins.push_back(g);
  }
  const auto& h = j.at("null_histogram");
  results::get_numbers(h, "edges", r.null_edges);
  results::get_to(h, "counts", r.null_counts);
}

inline void to_json(nlohmann::json& j, const DiagnosticTest& t) {
  const auto& pr = t.paper;
  j = {{"run", t.run},
       {"cell", t.cell},
       {"statistic", t.statistic},
       {"gap", t.result.gap},
       {"p", t.result.p},
       {"p_holm", t.p_holm},
       {"p_bh", t.p_bh},
       {"n", t.result.n},
       {"n_used", t.result.n_used},
       {"bins_used", t.result.bins.size()},
       {"bins_dropped", t.result.bins_dropped},
       {"exceed", t.result.exceed},
       {"permutations", t.result.permutations},
       {"strata", t.result.strata},
       {"seed", t.seed},
       {"bins", bins_json(t.result, true)},
       {"null_histogram", {{"edges", t.result.null_edges}, {"counts", t.result.null_counts}}},
       {"paper",
        {{"gap", pr.gap},
         {"p", pr.p},
         {"p_holm", t.paper_p_holm},
         {"p_bh", t.paper_p_bh},
         {"exceed", pr.exceed},
         {"permutations", pr.permutations},
         {"bins", bins_json(pr, false)},
         {"null_histogram", {{"edges", pr.null_edges}, {"counts", pr.null_counts}}}}}};
  if (t.result.clusters > 0) j["clusters"] = t.result.clusters;  // the clustered decision test (sign-flip)
}
inline void from_json(const nlohmann::json& j, DiagnosticTest& t) {
  results::get_to(j, "run", t.run);
  results::get_to(j, "cell", t.cell);
  results::get_to(j, "statistic", t.statistic);
  results::get_number(j, "gap", t.result.gap);
  results::get_number(j, "p", t.result.p);
  results::get_number(j, "p_holm", t.p_holm);
  results::get_number(j, "p_bh", t.p_bh);
  results::get_to(j, "n", t.result.n);
  results::get_to(j, "n_used", t.result.n_used);
  results::get_to(j, "bins_dropped", t.result.bins_dropped);
  results::get_to(j, "exceed", t.result.exceed);
  results::get_to(j, "permutations", t.result.permutations);
  results::get_to(j, "strata", t.result.strata);
  t.result.clusters = results::value_or<std::size_t>(j, "clusters", 0);
  results::get_to(j, "seed", t.seed);
  bins_from_json(j, t.result);
  const auto& pr = j.at("paper");
  results::get_number(pr, "gap", t.paper.gap);
  results::get_number(pr, "p", t.paper.p);
  results::get_number(pr, "p_holm", t.paper_p_holm);
  results::get_number(pr, "p_bh", t.paper_p_bh);
  results::get_to(pr, "exceed", t.paper.exceed);
  results::get_to(pr, "permutations", t.paper.permutations);
  bins_from_json(pr, t.paper);
  t.paper.n = t.result.n;
}

inline void to_json(nlohmann::json& j, const StabilityVerdict& v) {
  j = {{"cell", v.cell},
       {"statistic", v.statistic},
       {"seeds", v.seeds},
       {"rejections", v.rejections},
       {"rejections_positive", v.rejections_positive},
       {"rejections_negative", v.rejections_negative},
       {"assessable", v.assessable},
       {"stable", v.stable},
       {"verdict", v.verdict}};
}
inline void from_json(const nlohmann::json& j, StabilityVerdict& v) {
  results::get_to(j, "cell", v.cell);
  results::get_to(j, "statistic", v.statistic);
  results::get_to(j, "seeds", v.seeds);
  results::get_to(j, "rejections", v.rejections);
  results::get_to(j, "rejections_positive", v.rejections_positive);
  results::get_to(j, "rejections_negative", v.rejections_negative);
  results::get_to(j, "assessable", v.assessable);
  results::get_to(j, "stable", v.stable);
  results::get_to(j, "verdict", v.verdict);
}

inline void to_json(nlohmann::json& j, const DiagnosticFamily& d) {
  const auto& o = d.options;
  j = {{"family_size", d.family_size},
       {"alpha", o.alpha},
       {"bins", o.bins},
       {"binning", o.scheme == BinScheme::equal_width ? "equal_width" : "equal_mass"},
       {"min_bin_count", o.min_bin_count},
       {"permutations", o.permutations},
       {"seed", o.seed},
       {"strata_size", o.strata_size},
       {"decision",
        "residual test: r = a - q(c), q a 2-fold cross-fitted isotonic fit of correctness on logit c; "
        "G = sum_b w_b (mean r_top - mean r_bottom); null: s permuted within equal-mass strata of c "
        "(about strata_size examples) nested in each bin (conditional permutation)"},
       {"paper_protocol",
        "reported, never the decision: G = sum_b w_b ((acc - conf)_top - (acc - conf)_bottom), s permuted "
        "within each bin; invalid when s tracks c inside a bin and calibration varies with c"},
       {"tie_rule", "tertiles by sorted statistic; a tied run joins the lower tertile"},
       {"stability_rule",
        "on the decision test: not assessable with fewer than 2 seeds; otherwise stable when >= 2/3 of a "
        "cell's seeds reject (raw p <= alpha) with the same sign of G"},
       {"tests", d.tests},
       {"stability", d.verdicts}};
}
inline void from_json(const nlohmann::json& j, DiagnosticFamily& d) {
  auto& o = d.options;
  results::get_to(j, "family_size", d.family_size);
  results::get_number(j, "alpha", o.alpha);
  results::get_to(j, "bins", o.bins);
  const std::string binning = j.at("binning").get<std::string>();
  if (binning != "equal_width" && binning != "equal_mass")
    throw nlohmann::json::type_error::create(302, "binning must be equal_width or equal_mass", &j.at("binning"));
  o.scheme = binning == "equal_width" ? BinScheme::equal_width : BinScheme::equal_mass;
  results::get_to(j, "min_bin_count", o.min_bin_count);
  results::get_to(j, "permutations", o.permutations);
  results::get_to(j, "seed", o.seed);
  results::get_to(j, "strata_size", o.strata_size);
  results::get_to(j, "tests", d.tests);
  results::get_to(j, "stability", d.verdicts);
}

// ---------------------------------------------------------------- AR-CondCal

inline void to_json(nlohmann::json& j, const CalibrationScores& s) {
  j = {{"ece", s.ece}, {"worst_tertile_ece", s.worst_tertile_ece}, {"nll", s.nll}, {"brier", s.brier}};
}
inline void from_json(const nlohmann::json& j, CalibrationScores& s) {
  results::get_number(j, "ece", s.ece);
  results::get_number(j, "worst_tertile_ece", s.worst_tertile_ece);
  results::get_number(j, "nll", s.nll);
  results::get_number(j, "brier", s.brier);
}
inline void to_json(nlohmann::json& j, const SeedBand& s) { j = {{"mean", s.mean}, {"sd", s.sd}, {"runs", s.runs}}; }
inline void from_json(const nlohmann::json& j, SeedBand& s) {
  results::get_number(j, "mean", s.mean);
  results::get_number(j, "sd", s.sd);
  results::get_to(j, "runs", s.runs);
}
inline void to_json(nlohmann::json& j, const CondCalBand& b) {
  j = {{"ece", b.ece}, {"worst_tertile_ece", b.worst_tertile_ece}, {"nll", b.nll}, {"brier", b.brier}};
}
inline void from_json(const nlohmann::json& j, CondCalBand& b) {
  results::get_to(j, "ece", b.ece);
  results::get_to(j, "worst_tertile_ece", b.worst_tertile_ece);
  results::get_to(j, "nll", b.nll);
  results::get_to(j, "brier", b.brier);
}

inline void to_json(nlohmann::json& j, const AuditCondCalEntry& e) {
  nlohmann::json cv = nlohmann::json::object(), oracle = nlohmann::json::object(), scott = nlohmann::json::object();
  for (const auto& a : e.result.arms) {
    cv[a.name] = a.cv_nll;
    cv[a.name]["multiple"] = {a.multiple_cv[0], a.multiple_cv[1]};
    oracle[a.name] = a.oracle_ece;
    oracle[a.name]["multiple"] = {a.multiple_oracle[0], a.multiple_oracle[1]};
    scott[a.name] = a.by_multiple;
  }
  j = {{"run", e.run},
       {"cell", e.cell},
       {"statistic", e.statistic},
       {"n", e.result.n},
       {"uncalibrated", e.result.uncalibrated},
       {"rules", {{"cv_nll", cv}, {"oracle_ece", oracle}, {"scott_multiples", scott}}}};
}
inline void from_json(const nlohmann::json& j, AuditCondCalEntry& e) {
  results::get_to(j, "run", e.run);
  results::get_to(j, "cell", e.cell);
  results::get_to(j, "statistic", e.statistic);
  results::get_to(j, "n", e.result.n);
  results::get_to(j, "uncalibrated", e.result.uncalibrated);
  const auto& rules = j.at("rules");
  e.result.arms.clear();
  for (const auto& [name, cv] : results::object_at(rules, "cv_nll").items()) {
    CondCalArm a;
    a.name = name;
    cv.get_to(a.cv_nll);
    cv.at("multiple").get_to(a.multiple_cv);
    const auto& oracle = rules.at("oracle_ece").at(name);
    oracle.get_to(a.oracle_ece);
    oracle.at("multiple").get_to(a.multiple_oracle);
    rules.at("scott_multiples").at(name).get_to(a.by_multiple);
    e.result.arms.push_back(a);
  }
}
inline void to_json(nlohmann::json& j, const AuditCellBand& b) {
  j = {{"cell", b.cell}, {"control", "confidence_only"}, {"cv_nll", b.cv_nll}, {"oracle_ece", b.oracle_ece}};
}
inline void from_json(const nlohmann::json& j, AuditCellBand& b) {
  results::get_to(j, "cell", b.cell);
  results::get_to(j, "cv_nll", b.cv_nll);
  results::get_to(j, "oracle_ece", b.oracle_ece);
}

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
