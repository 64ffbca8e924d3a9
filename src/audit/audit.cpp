#include "audit/audit.hpp"

#include <chrono>

#include "results/audit_json.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "core/atomic_file.hpp"
#include "io/csv.hpp"
#include "core/check.hpp"
#include "core/rng.hpp"

namespace arcal {

namespace {
void run_condcal_family(const std::vector<AuditRunInput>& runs, const AuditOptions& options, AuditResults& out);
}

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
      family.push_back({run.run, run.cell, run.statistic_names[s], run.confidence, run.correct, run.statistics[s], run.cluster});
  const auto t0 = std::chrono::steady_clock::now();
  out.diagnostic = run_diagnostic_family(family, options.diagnostic);
  const auto t1 = std::chrono::steady_clock::now();
  out.diagnostic_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (const auto& run : runs) out.run_summaries.push_back(summarise_run(run, options.diagnostic.bins));
  if (options.run_condcal) {
    const auto t2 = std::chrono::steady_clock::now();
    run_condcal_family(runs, options, out);
    out.condcal_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  }
  out.verdict = make_verdict(out);
  return out;
}

namespace {
void run_condcal_family(const std::vector<AuditRunInput>& runs, const AuditOptions& options, AuditResults& out) {
  std::vector<std::string> cells;
  std::vector<std::vector<CondCalResult>> by_cell;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    for (std::size_t s = 0; s < run.statistics.size(); ++s) {
      CondCalOptions o = options.condcal;
      o.seed = derive_seed(options.condcal.seed, r);  // same splits for every statistic of a run
      o.threads = options.diagnostic.threads;         // the smoother's queries on the diagnostic's workers
      AuditCondCalEntry e{run.run, run.cell, run.statistic_names[s],
                          ar_condcal(run.confidence, run.correct, run.statistics[s], run.predictive_entropy, run.labels, o,
                                     run.cluster)};
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
}
}  // namespace

nlohmann::json audit_results_json(const AuditResults& res) { return res; }  // results/audit_json.hpp

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
    // Gains (control − probe, positive: the probe is better), the sign of results.json.
    cmp << "run,cell,comparison,probe,control,metric,gain,ci_low,ci_high,p,p_wilcoxon,p_sign,p_holm,verdict\n";
    for (const auto& r : res.probes.runs) {
      const std::string head = csv_field(r.run) + ',' + csv_field(r.cell) + ',';
      for (const auto& p : r.probes)
        pc << head << p.name << ',' << p.inputs << ',' << p.parameters << ',' << p.hidden1 << ',' << p.hidden2 << ','
           << p.scores.log_loss << ',' << p.scores.brier << ',' << p.scores.ece << ',' << p.mean_epochs << '\n';
      for (const auto& c : r.comparisons)
        for (std::size_t m = 0; m < kProbeMetrics.size(); ++m) {
          const MetricDelta& d = m == 0 ? c.log_loss : m == 1 ? c.brier : c.ece;
          cmp << head << c.name << ',' << c.probe << ',' << c.control << ',' << kProbeMetrics[m] << ',' << -d.delta
              << ',' << -d.ci.high << ',' << -d.ci.low << ',' << d.p << ",,,,\n";
        }
    }
    for (const auto& t : res.probes.tests)
      cmp << "ALL,ALL," << t.comparison << ",,," << t.metric << ',' << -t.mean_delta << ',' << -t.ci.high << ','
          << -t.ci.low << ',' << t.p << ',' << t.p_wilcoxon << ',' << t.p_sign << ',' << t.p_holm << ','
          << csv_field(t.verdict) << '\n';
    write_file_atomic(dir + "/probes.csv", pc.str());
    write_file_atomic(dir + "/probe_comparisons.csv", cmp.str());
  }
  if (res.has_sensitivity) {
    std::ostringstream sc;
    sc.precision(10);
    sc << "effect_nats,probe,gain,gain_ci_low,gain_ci_high,recovery,recovery_ci_low,recovery_ci_high,mean_epochs,kind\n";
    for (const auto& e : res.sensitivity.by_effect)
      for (const auto& p : e.probes) {
        sc << e.effect_nats << ',' << p.probe << ',' << p.gain << ',' << p.gain_ci.low << ',' << p.gain_ci.high << ',';
        if (p.has_recovery)
          sc << p.recovery << ',' << p.recovery_ci.low << ',' << p.recovery_ci.high;
        else
          sc << ",,";
        sc << ',' << p.mean_epochs << ',' << e.kind << '\n';
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
