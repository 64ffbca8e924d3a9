#include "audit/audit.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/atomic_file.hpp"
#include "io/csv.hpp"
#include "core/check.hpp"
#include "core/rng.hpp"

namespace arcal {

void validate_audit_inputs(const std::vector<AuditRunInput>& runs, const AuditOptions& options) {
  const char* fn = "validate_audit_inputs";
  if (runs.empty()) throw_input(fn, "no runs given; the audit needs at least one trace");
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    const std::string where = "run[" + std::to_string(r) + "] '" + run.run + "': ";
    if (run.classes != runs[0].classes)
      throw_input(fn, where + "has " + std::to_string(run.classes) + " classes but run[0] '" + runs[0].run + "' has " +
                          std::to_string(runs[0].classes) + "; every run must have the same class count");
    const std::size_t n = run.confidence.size();
    if (run.correct.size() != n || run.predictive_entropy.size() != n || run.labels.size() != n)
      throw_input(fn, where + "confidence, correct, predictive_entropy and labels must all have " + std::to_string(n) + " elements");
    if (n < options.diagnostic.bins)
      throw_input(fn, where + "has " + std::to_string(n) + " examples, fewer than the " +
                          std::to_string(options.diagnostic.bins) + " confidence bins");
    if (options.run_condcal && n < 4 * static_cast<std::size_t>(std::max(options.condcal.cv_folds, 2)))
      throw_input(fn, where + "has " + std::to_string(n) + " examples; AR-CondCal needs >= 2 * cv_folds per half");
    for (std::size_t i = 0; i < n; ++i)
      if (run.labels[i] < 0 || run.labels[i] >= static_cast<std::int64_t>(run.classes))
        throw_input(fn, where + "labels[" + std::to_string(i) + "] is " + std::to_string(run.labels[i]) +
                            ", but must be in [0, " + std::to_string(run.classes) + ")");
    if (run.statistics.empty())
      throw_input(fn, where + "declares no statistic, so the test family would be empty");
    if (run.statistic_names.size() != run.statistics.size())
      throw_input(fn, where + "statistic_names and statistics differ in length");
    for (std::size_t s = 0; s < run.statistics.size(); ++s) {
      const auto& v = run.statistics[s];
      if (v.size() != n)
        throw_input(fn, where + "statistic '" + run.statistic_names[s] + "' has " + std::to_string(v.size()) +
                            " values, but must have " + std::to_string(n));
      for (std::size_t i = 0; i < n; ++i) check_finite(fn, ("statistic '" + run.statistic_names[s] + "'").c_str(), i, v[i]);
      if (std::all_of(v.begin(), v.end(), [&](double x) { return x == v[0]; }))
        throw_input(fn, where + "statistic '" + run.statistic_names[s] + "' is constant; it carries no routing information to test");
    }
  }
}

AuditResults run_audit(const std::vector<AuditRunInput>& runs, const AuditOptions& options) {
  validate_audit_inputs(runs, options);
  AuditResults out;
  out.options = options;
  std::vector<DiagnosticTestSpec> family;
  for (const auto& run : runs)
    for (std::size_t s = 0; s < run.statistics.size(); ++s)
      family.push_back({run.run, run.cell, run.statistic_names[s], run.confidence, run.correct, run.statistics[s]});
  out.diagnostic = run_diagnostic_family(family, options.diagnostic);
  for (const auto& run : runs) out.run_summaries.push_back(summarise_run(run, options.diagnostic.bins));
  if (!options.run_condcal) return out;
  std::vector<std::string> cells;
  std::vector<std::vector<CondCalResult>> by_cell;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    for (std::size_t s = 0; s < run.statistics.size(); ++s) {
      CondCalOptions o = options.condcal;
      o.seed = derive_seed(options.condcal.seed, r);  // same splits for every statistic of a run
      AuditCondCalEntry e{run.run, run.cell, run.statistic_names[s],
                          ar_condcal(run.confidence, run.correct, run.statistics[s], run.predictive_entropy, run.labels, o)};
      if (s == 0) {
        auto it = std::find(cells.begin(), cells.end(), run.cell);
        if (it == cells.end()) {
          cells.push_back(run.cell);
          by_cell.emplace_back();
          it = cells.end() - 1;
        }
        by_cell[static_cast<std::size_t>(it - cells.begin())].push_back(e.result);
      }
      out.condcal.push_back(std::move(e));
    }
  }
  for (std::size_t c = 0; c < cells.size(); ++c)
    out.seed_bands.push_back({cells[c], seed_variance_band(by_cell[c], false), seed_variance_band(by_cell[c], true)});
  return out;
}

namespace {
nlohmann::json scores_json(const CalibrationScores& s) {
  return {{"ece", s.ece}, {"worst_tertile_ece", s.worst_tertile_ece}, {"nll", s.nll}, {"brier", s.brier}};
}
nlohmann::json band_json(const CondCalBand& b) {
  auto one = [](const SeedBand& s) { return nlohmann::json{{"mean", s.mean}, {"sd", s.sd}, {"runs", s.runs}}; };
  return {{"ece", one(b.ece)}, {"worst_tertile_ece", one(b.worst_tertile_ece)}, {"nll", one(b.nll)}, {"brier", one(b.brier)}};
}
nlohmann::json refit_json(const RefitSettings& r) {
  return {{"restarts", r.restarts}, {"max_epochs", r.max_epochs}, {"patience", r.patience},
          {"batch_size", r.batch_size}, {"lr", r.lr}, {"warm_start", r.warm_start}};
}
nlohmann::json interval_json(const Interval& ci) { return {ci.low, ci.high}; }

nlohmann::json probe_family_json(const ProbeFamily& f) {
  using nlohmann::json;
  json runs = json::array();
  for (const auto& r : f.runs) {
    json probes = json::object();
    for (const auto& p : r.probes)
      probes[p.name] = {{"log_loss", p.scores.log_loss}, {"brier", p.scores.brier}, {"ece", p.scores.ece},
                        {"parameters", p.parameters}, {"inputs", p.inputs}, {"hidden", {p.hidden1, p.hidden2}},
                        {"mean_epochs", p.mean_epochs}};
    json comps = json::array();
    for (const auto& c : r.comparisons) {
      auto one = [](const MetricDelta& d) {
        return json{{"delta", d.delta}, {"ci", interval_json(d.ci)}, {"se", d.se}, {"p", d.p},
                    {"split_deltas", d.split_deltas}};
      };
      comps.push_back({{"name", c.name}, {"probe", c.probe}, {"control", c.control}, {"log_loss", one(c.log_loss)},
                       {"brier", one(c.brier)}, {"ece", one(c.ece)}});
    }
    runs.push_back({{"run", r.run}, {"cell", r.cell}, {"n", r.n}, {"profile", r.profile_names}, {"probes", probes},
                    {"comparisons", comps}});
  }
  json tests = json::array();
  for (const auto& t : f.tests)
    tests.push_back({{"comparison", t.comparison}, {"metric", t.metric}, {"runs", t.deltas.size()},
                     {"deltas", t.deltas}, {"variances", t.variances}, {"mean_delta", t.mean_delta},
                     {"plain_mean", t.plain_mean}, {"ci", interval_json(t.ci)}, {"p", t.p}, {"tau2", t.tau2},
                     {"p_wilcoxon", t.p_wilcoxon}, {"p_sign", t.p_sign}, {"p_rank_min", t.p_rank_min},
                     {"p_holm", t.p_holm}, {"detectable_delta", t.detectable}, {"runs_better", t.runs_better},
                     {"runs_worse", t.runs_worse}, {"verdict", t.verdict}, {"power_note", t.power_note}});
  return {{"delta", "probe - control (negative: the probe is better)"},
          {"per_run_test",
           "mean over 2 x repeats cross-fit splits of the split-level delta; Nadeau-Bengio corrected variance "
           "(1/(2J) + n_eval/n_fit) S^2; t interval and p on 2J - 1 df"},
          {"across_run_test",
           "random effects (Paule-Mandel tau^2, Hartung-Knapp t interval on runs - 1 df); Holm over the "
           "comparison x metric family on p; Wilcoxon and sign tests shown with their smallest attainable p"},
          {"repeats", f.repeats},
          {"restarts", f.restarts}, {"max_epochs", f.max_epochs}, {"patience", f.patience},
          {"batch_size", f.batch_size}, {"lr", f.lr}, {"weight_decay", f.weight_decay}, {"inner_val", f.inner_val},
          {"shuffle_bins", f.shuffle_bins}, {"ece_bins", f.ece_bins},
          {"alpha", f.alpha}, {"seed", f.seed}, {"seconds", f.seconds}, {"family_size", f.tests.size()},
          {"runs", runs}, {"tests", tests}};
}

nlohmann::json sensitivity_json(const SensitivityResult& s) {
  using nlohmann::json;
  json effects = json::array();
  for (const auto& e : s.by_effect) {
    json probes = json::object();
    for (const auto& p : e.probes) {
      json one = {{"gain", p.gain}, {"gain_ci", interval_json(p.gain_ci)}, {"mean_epochs", p.mean_epochs}};
      one["recovery"] = p.has_recovery ? json(p.recovery) : json(nullptr);
      one["recovery_ci"] = p.has_recovery ? interval_json(p.recovery_ci) : json(nullptr);
      probes[p.probe] = one;
    }
    effects.push_back({{"effect_nats", e.effect_nats}, {"delta", e.delta}, {"oracle_gain", e.oracle_gain},
                       {"correction_ridge", e.correction_ridge},
                       {"mean_oracle_loss_gain", e.mean_oracle_loss_gain}, {"probes", probes}});
  }
  json verdicts = json::array();
  for (const auto& v : s.verdicts)
    verdicts.push_back({{"probe", v.probe}, {"recovery", v.recovery}, {"recovery_ci", interval_json(v.recovery_ci)},
                        {"verdict", v.verdict}});
  return {{"runs", s.runs}, {"statistic", s.statistic}, {"effects", s.effects}, {"draws", s.draws},
          {"bootstrap_draws", s.bootstrap_draws}, {"threshold", s.threshold},
          {"threshold_effect", s.threshold_effect}, {"correction_ridge", s.correction_ridge},
          {"correction_basis", "g(z) = b0 + b1 u + b2 u^2 + b3 u^3, u = clamp(z, -3, 3)/3, ridge on every b, Newton; "
                               "ridge from 5-fold inner CV over {0, 0.1, 1, 10, 100, 1000} when correction_ridge < 0"},
          {"verdict_rule", "absent when the lower end of R's 95 % interval at threshold_effect reaches threshold"},
          {"reference", "1-D Nadaraya-Watson on logit c, Scott bandwidth n^(-1/5), fitted per cross-fit fold on the calibration half"},
          {"recovery", "sum over (run, draw) of (l(q) - l(probe)) / sum of (l(q) - l(p*)); l = fold-mean log-loss on the evaluation halves"},
          {"seed", s.seed}, {"refit", refit_json(s.refit)},
          {"seconds", s.seconds}, {"by_effect", effects}, {"verdicts", verdicts}};
}

nlohmann::json exact_null_json(const ExactNullResult& x) {
  using nlohmann::json;
  auto runs_json = [](const std::vector<ExactNullRun>& rs, bool conditional) {
    json runs = json::array();
    for (const auto& r : rs) {
      json comps = json::array();
      for (const auto& c : r.comparisons)
        comps.push_back({{"comparison", c.comparison}, {"probe", c.probe}, {"control", c.control},
                         {"real_gain", c.real_gain}, {"null_mean", c.null_mean}, {"null_q95", c.null_q95}, {"p", c.p},
                         {"null_gain", c.null_gain}});
      json one = {{"run", r.run}, {"variant", r.variant}, {"comparisons", comps}};
      if (conditional)
        one["matching"] = {{"space", r.matching.space}, {"group_size", r.matching.group_size},
                           {"groups", r.matching.groups}, {"mean_distance", r.matching.mean_distance},
                           {"random_pair_distance", r.matching.random_pair_distance}};
      else
        one["reference_fit"] = {{"test", "Hosmer-Lemeshow over deciles of the reference on held-out halves"},
                                {"statistic", r.reference_fit.statistic}, {"df", r.reference_fit.df},
                                {"p", r.reference_fit.p}};
      runs.push_back(one);
    }
    return runs;
  };
  auto pooled_json = [](const std::vector<ExactNullPooled>& ps) {
    json pooled = json::array();
    for (const auto& p : ps)
      pooled.push_back({{"variant", p.variant}, {"comparison", p.comparison}, {"runs", p.runs},
                        {"real_mean_gain", p.real_mean_gain}, {"null_mean", p.null_mean}, {"null_q95", p.null_q95},
                        {"p", p.p}});
    return pooled;
  };
  json out = {{"null",
               "conditional permutation (the decision): the routing profile permuted within matched groups of "
               "examples with nearly identical outputs (variant confidence: logit c; full_logit: what the sorted "
               "probabilities predict about the routing profile, a balancing score), real labels, every profile-reading probe refitted from the same cold start"},
              {"gain", "l(control) - l(probe), fold-mean log-loss (positive: the probe is better)"},
              {"p", "(1 + #{null gain >= real gain}) / (replicates + 1)"},
              {"variants", x.variants}, {"replicates", x.replicates}, {"group_size", x.group_size}, {"seed", x.seed},
              {"refit", refit_json(x.refit)},
              {"seconds", x.seconds}, {"runs", runs_json(x.runs, true)}, {"pooled", pooled_json(x.pooled)}};
  if (x.has_model_based)
    out["model_based"] = {{"null",
                           "labels drawn from a fitted reference (confidence: 1-D Nadaraya-Watson on logit c; "
                           "full_logit: the full-logit MLP); valid only if the reference is right, see each run's "
                           "reference_fit; not the decision"},
                          {"runs", runs_json(x.model_runs, false)}, {"pooled", pooled_json(x.model_pooled)}};
  return out;
}

}  // namespace

nlohmann::json audit_results_json(const AuditResults& res) {
  using nlohmann::json;
  const auto& d = res.diagnostic;
  auto bins_json = [](const GapTestResult& r, bool residuals) {
    json bins = json::array();
    for (const auto& b : r.bins) {
      json one = {{"bin", b.bin}, {"n", b.n}, {"n_top", b.n_top}, {"n_bottom", b.n_bottom}, {"acc_top", b.acc_top},
                  {"conf_top", b.conf_top}, {"acc_bottom", b.acc_bottom}, {"conf_bottom", b.conf_bottom},
                  {"gap", b.gap}, {"weight", b.weight}};
      if (residuals) {
        one["resid_top"] = b.resid_top;
        one["resid_bottom"] = b.resid_bottom;
      }
      bins.push_back(one);
    }
    return bins;
  };
  json tests = json::array();
  for (const auto& t : d.tests) {
    const auto& pr = t.paper;
    tests.push_back({{"run", t.run}, {"cell", t.cell}, {"statistic", t.statistic}, {"gap", t.result.gap},
                     {"p", t.result.p}, {"p_holm", t.p_holm}, {"p_bh", t.p_bh}, {"n", t.result.n},
                     {"n_used", t.result.n_used}, {"bins_used", t.result.bins.size()},
                     {"bins_dropped", t.result.bins_dropped}, {"exceed", t.result.exceed},
                     {"permutations", t.result.permutations}, {"strata", t.result.strata}, {"seed", t.seed},
                     {"bins", bins_json(t.result, true)},
                     {"null_histogram", {{"edges", t.result.null_edges}, {"counts", t.result.null_counts}}},
                     {"paper",
                      {{"gap", pr.gap}, {"p", pr.p}, {"p_holm", t.paper_p_holm}, {"p_bh", t.paper_p_bh},
                       {"exceed", pr.exceed}, {"permutations", pr.permutations}, {"bins", bins_json(pr, false)},
                       {"null_histogram", {{"edges", pr.null_edges}, {"counts", pr.null_counts}}}}}});
  }
  auto rel_json = [](const std::vector<ReliabilityRow>& rows) {
    json a = json::array();
    for (const auto& r : rows) a.push_back({{"bin", r.bin}, {"n", r.n}, {"confidence", r.confidence}, {"accuracy", r.accuracy}});
    return a;
  };
  json summaries = json::array();
  for (const auto& s : res.run_summaries) {
    json tert = json::array();
    const char* names[3] = {"low", "middle", "high"};
    if (!s.tertile_statistic.empty())
      for (std::size_t g = 0; g < 3; ++g)
        tert.push_back({{"tertile", names[g]}, {"n", s.tertile_n[g]}, {"accuracy", s.tertile_accuracy[g]},
                        {"ece", s.tertile_ece[g]}, {"reliability", rel_json(s.tertile_reliability[g])}});
    json routing = nullptr;
    if (!s.routing_mean.empty()) {
      json rows = json::array();
      for (std::size_t p = 0; p < s.points; ++p)
        rows.push_back(std::vector<double>(s.routing_mean.begin() + long(p * s.sources),
                                           s.routing_mean.begin() + long((p + 1) * s.sources)));
      routing = {{"points", s.points}, {"sources", s.routing_sources}, {"mean", rows}};
    }
    summaries.push_back({{"run", s.run}, {"cell", s.cell}, {"n", s.n}, {"bins", s.bins}, {"accuracy", s.accuracy},
                         {"mean_confidence", s.mean_confidence}, {"ece", s.ece}, {"reliability", rel_json(s.reliability)},
                         {"tertile_statistic", s.tertile_statistic}, {"tertiles", tert}, {"routing_mean", routing}});
  }
  json stability = json::array();
  for (const auto& v : d.verdicts)
    stability.push_back({{"cell", v.cell}, {"statistic", v.statistic}, {"seeds", v.seeds}, {"rejections", v.rejections},
                         {"rejections_positive", v.rejections_positive},
                         {"rejections_negative", v.rejections_negative}, {"assessable", v.assessable},
                         {"stable", v.stable}, {"verdict", v.verdict}});
  const auto& o = d.options;
  json out = {{"schema", kAuditSchema},
              {"runs", summaries},
              {"diagnostic",
               {{"family_size", d.family_size},
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
                {"tests", tests},
                {"stability", stability}}}};
  if (res.has_probes) out["probes"] = probe_family_json(res.probes);
  if (res.has_sensitivity) out["sensitivity"] = sensitivity_json(res.sensitivity);
  if (res.has_exact_null) out["exact_null"] = exact_null_json(res.exact_null);
  if (!res.options.run_condcal) return out;
  json runs = json::array();
  for (const auto& e : res.condcal) {
    json cv = json::object(), oracle = json::object(), scott = json::object();
    for (const auto& a : e.result.arms) {
      cv[a.name] = scores_json(a.cv_nll);
      cv[a.name]["multiple"] = {a.multiple_cv[0], a.multiple_cv[1]};
      oracle[a.name] = scores_json(a.oracle_ece);
      oracle[a.name]["multiple"] = {a.multiple_oracle[0], a.multiple_oracle[1]};
      json fixed = json::array();
      for (const auto& m : a.by_multiple) fixed.push_back(scores_json(m));
      scott[a.name] = fixed;
    }
    runs.push_back({{"run", e.run}, {"cell", e.cell}, {"statistic", e.statistic}, {"n", e.result.n},
                    {"uncalibrated", scores_json(e.result.uncalibrated)},
                    {"rules", {{"cv_nll", cv}, {"oracle_ece", oracle}, {"scott_multiples", scott}}}});
  }
  json bands = json::array();
  for (const auto& b : res.seed_bands)
    bands.push_back({{"cell", b.cell}, {"control", "confidence_only"}, {"cv_nll", band_json(b.cv_nll)},
                     {"oracle_ece", band_json(b.oracle_ece)}});
  const auto& c = res.options.condcal;
  out["condcal"] = {{"multiples", c.multiples}, {"cv_folds", c.cv_folds}, {"ece_bins", c.ece_bins},
                    {"pseudo_count", c.pseudo_count}, {"clip", c.clip}, {"seed", c.seed},
                    {"runs", runs}, {"seed_band", bands}};
  return out;
}

void write_audit_results(const AuditResults& res, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_input("write_audit_results", "cannot create directory '" + dir + "': " + ec.message());
  std::ostringstream diag;
  diag.precision(10);
  diag << "run,cell,statistic,n,n_used,bins_used,gap,p,p_holm,p_bh,paper_gap,paper_p,paper_p_holm,paper_p_bh\n";
  for (const auto& t : res.diagnostic.tests)
    diag << csv_field(t.run) << ',' << csv_field(t.cell) << ',' << csv_field(t.statistic) << ',' << t.result.n << ','
         << t.result.n_used << ',' << t.result.bins.size() << ',' << t.result.gap << ',' << t.result.p << ',' << t.p_holm
         << ',' << t.p_bh << ',' << t.paper.gap << ',' << t.paper.p << ',' << t.paper_p_holm << ',' << t.paper_p_bh
         << '\n';
  write_file_atomic(dir + "/diagnostic.csv", diag.str());
  if (res.options.run_condcal) {
    std::ostringstream cc;
    cc.precision(10);
    cc << "run,cell,statistic,rule,arm,ece,worst_tertile_ece,nll,brier,multiple_fold0,multiple_fold1\n";
    for (const auto& e : res.condcal) {
      const std::string head = csv_field(e.run) + ',' + csv_field(e.cell) + ',' + csv_field(e.statistic) + ',';
      const auto& u = e.result.uncalibrated;
      for (const char* rule : {"cv_nll", "oracle_ece"})
        cc << head << rule << ",uncalibrated," << u.ece << ',' << u.worst_tertile_ece << ',' << u.nll << ',' << u.brier << ",,\n";
      for (const auto& a : e.result.arms) {
        const auto& s = a.cv_nll;
        cc << head << "cv_nll," << a.name << ',' << s.ece << ',' << s.worst_tertile_ece << ',' << s.nll << ',' << s.brier
           << ',' << a.multiple_cv[0] << ',' << a.multiple_cv[1] << '\n';
        const auto& q = a.oracle_ece;
        cc << head << "oracle_ece," << a.name << ',' << q.ece << ',' << q.worst_tertile_ece << ',' << q.nll << ','
           << q.brier << ',' << a.multiple_oracle[0] << ',' << a.multiple_oracle[1] << '\n';
      }
    }
    write_file_atomic(dir + "/condcal.csv", cc.str());
  }
  if (res.has_probes) {
    std::ostringstream pc, cmp;
    pc.precision(10);
    cmp.precision(10);
    pc << "run,cell,probe,inputs,parameters,hidden1,hidden2,log_loss,brier,ece,mean_epochs\n";
    cmp << "run,cell,comparison,probe,control,metric,delta,ci_low,ci_high,p,p_wilcoxon,p_sign,p_holm,verdict\n";
    for (const auto& r : res.probes.runs) {
      const std::string head = csv_field(r.run) + ',' + csv_field(r.cell) + ',';
      for (const auto& p : r.probes)
        pc << head << p.name << ',' << p.inputs << ',' << p.parameters << ',' << p.hidden1 << ',' << p.hidden2 << ','
           << p.scores.log_loss << ',' << p.scores.brier << ',' << p.scores.ece << ',' << p.mean_epochs << '\n';
      for (const auto& c : r.comparisons)
        for (std::size_t m = 0; m < kProbeMetrics.size(); ++m) {
          const MetricDelta& d = m == 0 ? c.log_loss : m == 1 ? c.brier : c.ece;
          cmp << head << c.name << ',' << c.probe << ',' << c.control << ',' << kProbeMetrics[m] << ',' << d.delta
              << ',' << d.ci.low << ',' << d.ci.high << ',' << d.p << ",,,,\n";
        }
    }
    for (const auto& t : res.probes.tests)
      cmp << "ALL,ALL," << t.comparison << ",,," << t.metric << ',' << t.mean_delta << ',' << t.ci.low << ','
          << t.ci.high << ',' << t.p << ',' << t.p_wilcoxon << ',' << t.p_sign << ',' << t.p_holm << ','
          << csv_field(t.verdict) << '\n';
    write_file_atomic(dir + "/probes.csv", pc.str());
    write_file_atomic(dir + "/probe_comparisons.csv", cmp.str());
  }
  if (res.has_sensitivity) {
    std::ostringstream sc;
    sc.precision(10);
    sc << "effect_nats,probe,gain,gain_ci_low,gain_ci_high,recovery,recovery_ci_low,recovery_ci_high,mean_epochs\n";
    for (const auto& e : res.sensitivity.by_effect)
      for (const auto& p : e.probes) {
        sc << e.effect_nats << ',' << p.probe << ',' << p.gain << ',' << p.gain_ci.low << ',' << p.gain_ci.high << ',';
        if (p.has_recovery)
          sc << p.recovery << ',' << p.recovery_ci.low << ',' << p.recovery_ci.high;
        else
          sc << ",,";
        sc << ',' << p.mean_epochs << '\n';
      }
    write_file_atomic(dir + "/sensitivity.csv", sc.str());
  }
  if (res.has_exact_null) {
    std::ostringstream xc;
    xc.precision(10);
    xc << "null,run,variant,comparison,probe,control,real_gain,null_mean,null_q95,p,replicates\n";
    auto rows = [&](const char* kind, const std::vector<ExactNullRun>& rs, const std::vector<ExactNullPooled>& ps) {
      for (const auto& r : rs)
        for (const auto& c : r.comparisons)
          xc << kind << ',' << csv_field(r.run) << ',' << r.variant << ',' << c.comparison << ',' << c.probe << ','
             << c.control << ',' << c.real_gain << ',' << c.null_mean << ',' << c.null_q95 << ',' << c.p << ','
             << c.null_gain.size() << '\n';
      for (const auto& p : ps)
        xc << kind << ",ALL," << p.variant << ',' << p.comparison << ",,," << p.real_mean_gain << ',' << p.null_mean
           << ',' << p.null_q95 << ',' << p.p << ',' << res.exact_null.replicates << '\n';
    };
    rows("conditional", res.exact_null.runs, res.exact_null.pooled);
    if (res.exact_null.has_model_based) rows("model_based", res.exact_null.model_runs, res.exact_null.model_pooled);
    write_file_atomic(dir + "/exact_null.csv", xc.str());
  }
  write_file_atomic(dir + "/results.json", audit_results_json(res).dump(2) + "\n");
}

}  // namespace arcal
