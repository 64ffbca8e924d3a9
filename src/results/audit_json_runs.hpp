// The first half of results/audit_json.hpp (which includes it; read that header's notes): the JSON form
// of the pieces the probe, sensitivity and exact-null results share (RefitSettings), of each run's
// summary (reliability rows, the expert view) and of the diagnostic and AR-CondCal families, as ADL
// to_json/from_json pairs. The probes, the sensitivity audit, the exact null and the whole audit are
// in audit_json.hpp.
#pragma once

#include <nlohmann/json.hpp>

#include "audit/audit.hpp"
#include "results/json_fields.hpp"

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

}  // namespace arcal
