#include "results/audit_files.hpp"

#include <filesystem>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "io/csv.hpp"
#include "results/audit_json.hpp"

namespace arcal {

nlohmann::json audit_results_json(const AuditResults& res) { return res; }  // to_json of results/audit_json.hpp

void write_audit_results(const AuditResults& res, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_input("write_audit_results", "cannot create directory '" + dir + "': " + ec.message());
  std::ostringstream diag;
  diag.precision(10);
  diag << "run,cell,statistic,n,n_used,bins_used,gap,p,p_holm,p_bh,paper_gap,paper_p,paper_p_holm,paper_p_bh\n";
  for (const auto& t : res.diagnostic.tests)
    diag << csv_field(t.run) << ',' << csv_field(t.cell) << ',' << csv_field(t.statistic) << ',' << t.result.n << ','
         << t.result.n_used << ',' << t.result.bins.size() << ',' << t.result.gap << ',' << t.result.p << ','
         << t.p_holm << ',' << t.p_bh << ',' << t.paper.gap << ',' << t.paper.p << ',' << t.paper_p_holm << ','
         << t.paper_p_bh << '\n';
  write_file_atomic(dir + "/diagnostic.csv", diag.str());
  if (res.options.run_condcal) {
    std::ostringstream cc;
    cc.precision(10);
    cc << "run,cell,statistic,rule,arm,ece,worst_tertile_ece,nll,brier,multiple_fold0,multiple_fold1\n";
    for (const auto& e : res.condcal) {
      const std::string head = csv_field(e.run) + ',' + csv_field(e.cell) + ',' + csv_field(e.statistic) + ',';
      const auto& u = e.result.uncalibrated;
      for (const char* rule : {"cv_nll", "oracle_ece"})
        cc << head << rule << ",uncalibrated," << u.ece << ',' << u.worst_tertile_ece << ',' << u.nll << ',' << u.brier
           << ",,\n";
      for (const auto& a : e.result.arms) {
        const auto& s = a.cv_nll;
        cc << head << "cv_nll," << a.name << ',' << s.ece << ',' << s.worst_tertile_ece << ',' << s.nll << ','
           << s.brier << ',' << a.multiple_cv[0] << ',' << a.multiple_cv[1] << '\n';
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
    sc << "effect_nats,probe,gain,gain_ci_low,gain_ci_high,recovery,recovery_ci_low,recovery_ci_high,mean_epochs,"
          "kind\n";
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
