// The audit's sections of the report (diagnostic, AR-CondCal, probes, sensitivity, exact null).
#include <fmt/format.h>

#include <cmath>

#include "report/sections.hpp"
#include "report/format.hpp"

namespace arcal::report {

namespace {

const std::vector<std::string> kArms = {"probe", "confidence_only", "predictive_entropy", "shuffled_within_bins"};

const CondCalArm* arm(const CondCalResult& r, const std::string& name) {
  for (const auto& a : r.arms)
    if (a.name == name) return &a;
  return nullptr;
}

}  // namespace

Section diagnostic_section(Context& c) {
  const auto& d = c.doc.audit.diagnostic;
  const auto& o = d.options;
  Section s{"Matched-confidence diagnostic", {}};
  s.p(fmt::format(
      "Family of {} declared tests (run x statistic); {} {} confidence bins (bins with fewer than {} examples "
      "dropped); R = {} permutations; alpha = {}. Decision: residuals a - q(c) against a cross-fitted "
      "isotonic q, routing permuted within ~{}-example strata of confidence (a conditional permutation "
      "test that holds its level when routing tracks confidence). The paper's protocol (a - c, "
      "within-bin permutation) is shown beside it, never the decision: it rejects falsely when routing "
      "tracks confidence inside a bin and the model is miscalibrated.",
      d.family_size, o.bins, o.scheme == BinScheme::equal_width ? "equal-width" : "equal-mass", o.min_bin_count,
      o.permutations, o.alpha, o.strata_size));
  Table t{{"#", "run", "statistic", "n used", "gap G_r", "p", "p Holm", "p BH", "paper G", "paper p", "paper p Holm"},
          {}};
  std::vector<HistPanel> hist;
  std::vector<PRow> ps;
  for (std::size_t i = 0; i < d.tests.size(); ++i) {
    const auto& te = d.tests[i];
    const auto& r = te.result;
    t.rows.push_back({std::to_string(i + 1), run_label(c, te.run), te.statistic, std::to_string(r.n_used),
                      fmt::format("{:+.5f}", r.gap), pval(r.p), pval(te.p_holm), pval(te.p_bh),
                      fmt::format("{:+.5f}", te.paper.gap), pval(te.paper.p), pval(te.paper_p_holm)});
    HistPanel h{
        fmt::format("#{} {} {}: p = {}", i + 1, run_label(c, te.run), te.statistic, pval(r.p)), {}, {}, {}, r.gap};
    for (std::size_t b = 0; b + 1 < r.null_edges.size() && b < r.null_counts.size(); ++b) {
      h.centres.push_back(0.5 * (r.null_edges[b] + r.null_edges[b + 1]));
      h.counts.push_back(double(r.null_counts[b]));
    }
    hist.push_back(h);
    ps.push_back({fmt::format("{}:{}", i + 1, te.statistic), r.p, te.p_holm, te.p_bh});
  }
  s.tab(t,
        "p: the decision test's conditional permutation p; Holm and Benjamini-Hochberg adjustments over the whole "
        "family. paper: the seed paper's protocol (reported, not the decision).");
  c.csv.push_back({"diagnostic.csv", t});
  if (!hist.empty()) {
    histogram_figure(c.figures, "diagnostic_null", "Conditional-permutation null of the weighted gap G (red: observed)",
                     "G*", hist);
    s.fig("diagnostic_null",
          fmt::format("Null histogram of each test ({} permutations) with its observed gap.", o.permutations));
    pvalue_figure(c.figures, "diagnostic_pvalues", ps, o.alpha);
    s.fig("diagnostic_pvalues",
          fmt::format("-log10 p of the {} tests, raw and adjusted; bars above the dashed line reject at "
                      "alpha = {}.",
                      d.tests.size(), o.alpha));
  }
  Table st{{"cell", "statistic", "seeds", "rejections (raw p)", "positive", "negative", "verdict"}, {}};
  for (const auto& v : d.verdicts)
    st.rows.push_back({v.cell, v.statistic, std::to_string(v.seeds), std::to_string(v.rejections),
                       std::to_string(v.rejections_positive), std::to_string(v.rejections_negative), v.verdict});
  s.tab(st,
        "Cross-seed stability of the decision test: not assessable with one seed; stable when at least 2/3 of a cell's "
        "seeds reject with the same sign of G.");
  return s;
}

Section condcal_section(Context& c) {
  const auto& a = c.doc.audit;
  Section s{"AR-CondCal", {}};
  Table t{{"run", "statistic", "rule", "arm", "ECE", "worst-tertile ECE", "NLL", "Brier", "multiples"}, {}};
  std::vector<std::string> cats;
  CategoryPanel ece{"ECE", "ECE", {}, {}, {}, "confidence-only: mean +/- sd over the cell's seeds"};
  CategoryPanel wt{"worst-tertile ECE", "worst-tertile ECE", {}, {}, {}, ece.band_name};
  for (const auto& name : kArms) {
    ece.series.push_back({name, {}, {}, {}, {}});
    wt.series.push_back({name, {}, {}, {}, {}});
  }
  ece.series.push_back({"uncalibrated", {}, {}, {}, {}});
  wt.series.push_back({"uncalibrated", {}, {}, {}, {}});
  for (std::size_t k = 0; k < a.condcal.size(); ++k) {
    const auto& e = a.condcal[k];
    cats.push_back(fmt::format("{}:{}", k + 1, e.statistic));
    for (std::size_t i = 0; i < kArms.size(); ++i) {
      const auto* x = arm(e.result, kArms[i]);
      for (int rule = 0; rule < 2 && x; ++rule) {
        const auto& sc = rule == 0 ? x->cv_nll : x->oracle_ece;
        const auto& m = rule == 0 ? x->multiple_cv : x->multiple_oracle;
        t.rows.push_back({run_label(c, e.run), e.statistic, rule == 0 ? "cv_nll" : "oracle_ece", kArms[i], f4(sc.ece),
                          f4(sc.worst_tertile_ece), f4(sc.nll), f4(sc.brier), fmt::format("[{}, {}]", m[0], m[1])});
      }
      ece.series[i].y.push_back(x ? x->cv_nll.ece : NAN);
      wt.series[i].y.push_back(x ? x->cv_nll.worst_tertile_ece : NAN);
    }
    ece.series.back().y.push_back(e.result.uncalibrated.ece);
    wt.series.back().y.push_back(e.result.uncalibrated.worst_tertile_ece);
    const AuditCellBand* band = nullptr;
    for (const auto& b : a.seed_bands)
      if (b.cell == e.cell) band = &b;
    ece.band_low.push_back(band ? band->cv_nll.ece.mean - band->cv_nll.ece.sd : NAN);
    ece.band_high.push_back(band ? band->cv_nll.ece.mean + band->cv_nll.ece.sd : NAN);
    wt.band_low.push_back(band ? band->cv_nll.worst_tertile_ece.mean - band->cv_nll.worst_tertile_ece.sd : NAN);
    wt.band_high.push_back(band ? band->cv_nll.worst_tertile_ece.mean + band->cv_nll.worst_tertile_ece.sd : NAN);
  }
  s.tab(t,
        "Per run and statistic: the AR-CondCal probe (logit c, routing statistic) and its matched controls under the "
        "CV-NLL and oracle-ECE bandwidth rules (fold means over the two cross-fit halves).");
  c.csv.push_back({"condcal.csv", t});
  category_figure(c.figures, "condcal_band", "AR-CondCal (CV-NLL bandwidth) against the seed-variance band", cats,
                  {ece, wt});
  s.fig("condcal_band",
        fmt::format("AR-CondCal probe and controls for each of the {} run x statistic entries (x axis; n = {} "
                    "examples per run), against the band mean +/- sd of the confidence-only control over "
                    "the seeds of the cell.",
                    a.condcal.size(), a.condcal.empty() ? 0 : a.condcal.front().result.n));
  std::vector<CurveSeries> curves;
  const auto& mult = a.options.condcal.multiples;
  for (const auto& e : a.condcal)
    for (const char* name : {"probe", "confidence_only"}) {
      const auto* x = arm(e.result, name);
      if (!x || x->by_multiple.size() != mult.size()) continue;
      CurveSeries cs{fmt::format("{} {} {}", run_label(c, e.run), e.statistic, name), mult, {}, {}, {}};
      for (const auto& sc : x->by_multiple) cs.y.push_back(sc.nll);
      curves.push_back(cs);
    }
  if (!curves.empty()) {
    curves_figure(c.figures, "condcal_bandwidth", "Bandwidth sensitivity (fixed Scott multiples)", "Scott multiple m",
                  "binary NLL (evaluation halves)", curves, true, NAN);
    s.fig("condcal_bandwidth",
          "Binary NLL of the probe and the confidence-only control at each fixed Scott bandwidth "
          "multiple, per run and statistic: a probe that wins only at one bandwidth is fragile.");
  }
  return s;
}

Section probes_section(Context& c) {
  const auto& p = c.doc.audit.probes;
  Section s{"MLP probes and controls", {}};
  s.p("Gain = control's loss minus the probe's (positive: the probe is better). Per run: the mean over repeated "
      "cross-fit splits with the Nadeau-Bengio corrected interval. Across runs: random-effects (Paule-Mandel tau^2, "
      "Hartung-Knapp) mean, interval and p; Holm over the whole probe family decides the verdict. Wilcoxon and sign "
      "tests "
      "are shown with the smallest p they can reach with this many runs. Run counts are counts, not tests.");
  Table tt{{"comparison", "metric", "gain (random effects)", "95 % CI", "p", "p Holm", "p Wilcoxon (min)", "p sign",
            "runs with interval above/below 0", "detectable", "verdict"},
           {}};
  std::vector<GainRow> rows;
  for (const auto& t : p.tests) {
    const Interval g = gain_ci(t.ci);
    tt.rows.push_back({t.comparison, t.metric, sgn(-t.mean_delta), ci(g, 5), pval(t.p), pval(t.p_holm),
                       fmt::format("{} ({})", pval(t.p_wilcoxon), pval(t.p_rank_min)), pval(t.p_sign),
                       fmt::format("{}/{}", t.runs_better, t.runs_worse), sgn(t.detectable), t.verdict});
    if (t.metric != "log_loss") continue;
    GainRow row{t.comparison, {}, {}, {}, -t.mean_delta, g.low, g.high};
    for (const auto& run : p.runs)
      for (const auto& cmp : run.comparisons)
        if (cmp.name == t.comparison) {
          const Interval run_ci = gain_ci(cmp.log_loss.ci);
          row.run_gain.push_back(-cmp.log_loss.delta);
          row.run_low.push_back(run_ci.low);
          row.run_high.push_back(run_ci.high);
        }
    rows.push_back(row);
  }
  if (!p.tests.empty() && !p.tests.front().power_note.empty()) s.p("Power: " + p.tests.front().power_note + ".");
  s.tab(tt,
        fmt::format("{} runs, {} repeats of a 2-fold cross-fit per run; detectable: the gain this test detects with "
                    "80 % power.",
                    p.runs.size(), p.repeats));
  c.csv.push_back({"probe_tests.csv", tt});
  Table tp{{"run", "probe", "inputs", "parameters", "log-loss", "Brier", "ECE", "mean epochs"}, {}};
  for (const auto& run : p.runs)
    for (const auto& f : run.probes)
      tp.rows.push_back({run_label(c, run.run), f.name, std::to_string(f.inputs), std::to_string(f.parameters),
                         f4(f.scores.log_loss), f4(f.scores.brier), f4(f.scores.ece),
                         fmt::format("{:.1f}", f.mean_epochs)});
  c.csv.push_back({"probes.csv", tp});
  gain_figure(c.figures, "probe_gains", "Probe log-loss gain over its control (positive: probe better)", rows);
  s.fig("probe_gains",
        fmt::format("Log-loss gain of each probe over its matched control: per run (n = {} examples each) "
                    "with its corrected interval, and across the {} runs with the Hartung-Knapp interval.",
                    p.runs.empty() ? 0 : p.runs.front().n, p.runs.size()));
  return s;
}

Section sensitivity_section(Context& c) {
  const auto& se = c.doc.audit.sensitivity;
  Section s{"Sensitivity (injection) audit", {}};
  s.p(fmt::format(
      "{} runs x {} synthetic label draws per effect; every probe refitted. Recovery R = (loss of the reference "
      "q(c) - loss of the probe) / oracle gain. 'Absent' needs the lower end of R's interval at {} nats to "
      "reach {}.{}",
      se.runs.size(), se.draws, se.threshold_effect, se.threshold,
      se.class_effects.empty() ? ""
                               : " Rows marked 'one class' inject the effect only in each run's most frequent "
                                 "predicted class (a class-specific effect of the same mean size)."));
  if (const auto scope = refit_scope_text(se.refit); !scope.empty()) s.p(scope);
  Table t{{"effect [nats]", "probe", "R", "95 % CI", "gain [nats]", "95 % CI"}, {}};
  std::vector<CurveSeries> curves;
  for (const auto& e : se.by_effect)
    for (const auto& pr : e.probes) {
      t.rows.push_back({fmt::format("{:g}{}", e.effect_nats, e.kind == "one class" ? " (one class)" : ""), pr.probe,
                        pr.has_recovery ? fmt::format("{:+.3f}", pr.recovery) : "-",
                        pr.has_recovery ? ci(pr.recovery_ci, 3) : "-", sgn(pr.gain), ci(pr.gain_ci, 5)});
      if (!pr.has_recovery || e.kind == "one class") continue;  // the curves: injections on every class
      auto it = std::find_if(curves.begin(), curves.end(), [&](const CurveSeries& x) { return x.name == pr.probe; });
      if (it == curves.end()) it = curves.insert(curves.end(), CurveSeries{pr.probe, {}, {}, {}, {}});
      it->x.push_back(e.effect_nats);
      it->y.push_back(pr.recovery);
      it->low.push_back(pr.recovery_ci.low);
      it->high.push_back(pr.recovery_ci.high);
    }
  s.tab(t);
  c.csv.push_back({"sensitivity.csv", t});
  Table v{{"probe", "R at threshold effect", "95 % CI", "verdict"}, {}};
  for (const auto& x : se.verdicts)
    v.rows.push_back({x.probe, fmt::format("{:+.3f}", x.recovery), ci(x.recovery_ci, 3), x.verdict});
  s.tab(v, "Verdict on the real labels: 'absent' only where the audit would have seen the threshold effect.");
  curves_figure(c.figures, "sensitivity_recovery", "Injection recovery R against the injected oracle gain",
                "injected effect [nats]", "recovery R", curves, true, se.threshold);
  s.fig("sensitivity_recovery", fmt::format("Recovery of each probe (95 % bootstrap interval over {} runs x {} draws); "
                                            "dashed: the threshold {}.",
                                            se.runs.size(), se.draws, se.threshold));
  return s;
}

Section exact_null_section(Context& c) {
  const auto& x = c.doc.audit.exact_null;
  Section s{"Exact-null audit", {}};
  s.p(fmt::format(
      "Decision null: the routing profile permuted within matched groups of about {} examples whose outputs are "
      "nearly identical (confidence: logit c; full_logit: the routing profile as predicted from the sorted "
      "probabilities, and P(correct) as predicted from the logits), the real labels kept, every probe that reads "
      "the profile refitted ({} replicates per run and variant). Monte-Carlo p = (1 + #{{null >= real}}) / (R + 1). "
      "The full_logit variant held its level on the validated families except one: routing that tracks a "
      "nonlinear function of the outputs which correctness also depends on, where it rejected 6 of 40 null runs "
      "at 0.05 (docs/audit_validation.md); read a small full_logit p with that in mind.",
      x.group_size, x.replicates));
  if (x.stop_after > 0)
    s.p(fmt::format(
        "Sequential Monte Carlo (Besag & Clifford): each variant drew replicates in batches of {} per run and "
        "stopped once every pooled comparison had {} null means at or above its real mean, which settles its "
        "decision at the audit's alpha (the fixed-count test would decide the same); p = {} / L for a comparison "
        "whose {}-th such null mean came at replicate L, else the Monte-Carlo p over the replicates drawn. Per-run "
        "p-values under a pooled stopping rule are descriptive.",
        x.stop_after, x.stop_after, x.stop_after, x.stop_after));
  if (const auto scope = refit_scope_text(x.refit); !scope.empty()) s.p(scope);
  Table mt{{"run", "variant", "groups", "mean within-group distance", "random-pair distance"}, {}};
  for (const auto& r : x.runs)
    mt.rows.push_back({run_label(c, r.run), r.variant, std::to_string(r.matching.groups),
                       fmt::format("{:.3g}", r.matching.mean_distance),
                       fmt::format("{:.3g}", r.matching.random_pair_distance)});
  s.tab(mt, "Matching resolution (in the matching space's units).");
  Table t{{"variant", "comparison", "runs", "replicates", "real mean gain", "null mean", "null q95", "p"}, {}};
  std::vector<HistPanel> hist;
  for (const auto& p : x.pooled) {
    t.rows.push_back({p.variant, p.comparison, std::to_string(p.runs), std::to_string(p.replicates),
                      sgn(p.real_mean_gain), sgn(p.null_mean), sgn(p.null_q95), pval(p.p)});
    if (!p.null_mean_gain.empty())
      hist.push_back({fmt::format("{}: {} (p = {})", p.variant, p.comparison, pval(p.p)),
                      {},
                      {},
                      p.null_mean_gain,
                      p.real_mean_gain});
  }
  s.tab(t, "Pooled over runs: replicate j's mean gain over runs is one draw of the null of the mean gain.");
  c.csv.push_back({"exact_null.csv", t});
  if (x.has_model_based) {
    Table mb{{"variant", "comparison", "runs", "real mean gain", "null q95", "p (model-based)"}, {}};
    for (const auto& p : x.model_pooled)
      mb.rows.push_back(
          {p.variant, p.comparison, std::to_string(p.runs), sgn(p.real_mean_gain), sgn(p.null_q95), pval(p.p)});
    Table fit{{"run", "variant", "Hosmer-Lemeshow", "df", "p"}, {}};
    for (const auto& r : x.model_runs)
      fit.rows.push_back({run_label(c, r.run), r.variant, fmt::format("{:.1f}", r.reference_fit.statistic),
                          fmt::format("{:.0f}", r.reference_fit.df), pval(r.reference_fit.p)});
    s.tab(mb,
          "Model-based null (labels drawn from a fitted reference): shown, not the decision; valid only if the "
          "reference is right.");
    s.tab(fit, "Goodness of fit of the model-based null's reference on held-out halves (small p: misspecified).");
  }
  if (!hist.empty()) {
    histogram_figure(c.figures, "exact_null", "Exact-null distribution of the mean gain over runs (red: real)",
                     "gain [nats]", hist);
    s.fig("exact_null",
          fmt::format("Null distribution (at most {} replicates; drawn: the table's column) of each comparison's "
                      "mean gain over runs, with the real mean gain.",
                      x.replicates));
  }
  return s;
}

}  // namespace arcal::report
