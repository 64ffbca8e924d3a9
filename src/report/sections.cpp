#include "report/sections.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <set>
#include <utility>

#include "report/format.hpp"

namespace arcal::report {

namespace {

namespace fs = std::filesystem;

std::vector<RelPoint> rel_points(const std::vector<ReliabilityRow>& rows) {
  std::vector<RelPoint> out;
  for (const auto& r : rows)
    if (r.n > 0) out.push_back({r.confidence, r.accuracy, r.n, r.band_low, r.band_high});
  return out;
}
std::vector<RelPoint> rel_points(const CalibrationReport& m) { return reliability_series("", m.reliability).rows; }

std::string evidence_row_test(const VerdictEvidence& e) {
  if (e.test == "exact_null.conditional_permutation") return "exact null, conditional permutation (" + e.variant + ")";
  if (e.test == "probes.across_runs")
    return e.runs > 1 ? "probes across runs (Hartung-Knapp)" : "probe, the run's split test";
  if (e.test == "diagnostic.decision") return "matched-confidence diagnostic (decision test, smallest Holm p)";
  return e.test;
}

/// The link's effect with its own unit: the diagnostic's weighted accuracy gap G (a difference of
/// proportions), or a log-loss gain in nats (the probes', the exact null's real gain).
std::string evidence_effect(const VerdictEvidence& e) {
  if (!std::isfinite(e.effect)) return "-";
  return e.test == "diagnostic.decision" ? fmt::format("G = {:+.5f} (accuracy gap)", e.effect)
                                         : sgn(e.effect) + " nats";
}

/// The verdict's answer in one sentence without statistical names, for the first screen; the
/// statistical summary and the chain follow it.
std::string plain_answer(const Verdict& v) {
  const std::string delta = fmt::format("{:g} nats", v.smallest_effect);
  if (v.answer == "present")
    return "Yes: the routing says something about whether a prediction is right that the model's confidence does not.";
  if (v.answer == "negligible")
    return "No useful signal: whatever the routing adds to the model's confidence about whether a prediction is right "
           "is smaller than the smallest effect of interest (" +
           delta + ").";
  if (v.answer == "absent")
    return "No: the routing adds nothing detectable to the model's confidence, and an effect of " + delta +
           " would have been seen.";
  if (v.answer == "undetected")
    return "Open: these data cannot tell whether the routing adds a useful signal beyond the model's confidence.";
  return "Not answered: the audit did not measure how large an effect of the routing could be.";
}

/// What the audit did not run, and what that leaves open.
std::vector<std::string> skipped_stages(const AuditResults& a) {
  std::vector<std::string> out;
  if (!a.has_probes)
    out.push_back("probes not run: no gain and no interval, so neither 'present' nor 'negligible' can be concluded");
  if (!a.has_sensitivity)
    out.push_back(
        "sensitivity audit not run: 'absent' cannot be concluded (nothing shows an effect of the smallest "
        "size would have been seen)");
  if (!a.has_exact_null)
    out.push_back(
        "exact-null audit not run: dependence is decided by the matched-confidence diagnostic, and "
        "'beyond the whole output vector' by the full-logit probe");
  return out;
}

}  // namespace

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

std::map<std::string, std::string> run_labels(const std::vector<std::string>& runs) {
  std::vector<std::string> unique;
  for (const auto& r : runs)
    if (std::find(unique.begin(), unique.end(), r) == unique.end()) unique.push_back(r);
  std::vector<std::vector<std::string>> parts(unique.size());  // path components, last first
  for (std::size_t i = 0; i < unique.size(); ++i)
    for (fs::path p = fs::path(unique[i]).lexically_normal(); !p.empty() && p.has_filename(); p = p.parent_path())
      parts[i].push_back(p.filename().string());
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i < unique.size(); ++i) {
    std::string label = unique[i];
    for (std::size_t depth = 1; depth <= parts[i].size(); ++depth) {
      auto suffix = [&](std::size_t j) {
        std::string s;
        for (std::size_t k = std::min(depth, parts[j].size()); k-- > 0;) s += (s.empty() ? "" : "/") + parts[j][k];
        return s;
      };
      const std::string mine = suffix(i);
      bool clash = false;
      for (std::size_t j = 0; j < unique.size() && !clash; ++j) clash = j != i && suffix(j) == mine;
      if (!clash) {
        label = mine;
        break;
      }
    }
    out[unique[i]] = label;
  }
  // What every label shares says nothing about which run it is: a file name all of them end with
  // ("DIR/test.npz" of a study's runs), then a leading part up to a '-' they all start with
  // ("fashion-mnist-ar-vit-tiny-full-"). Panel titles of 400 px used to overlap with 50-character names.
  if (out.size() > 1) {
    auto all = [&](auto pred) {
      return std::all_of(out.begin(), out.end(), [&](const auto& kv) { return pred(kv.second); });
    };
    const std::string first = out.begin()->second;
    const std::size_t slash = first.rfind('/');
    if (slash != std::string::npos) {
      const std::string tail = first.substr(slash);
      if (all([&](const std::string& l) {
            return l.size() > tail.size() && l.compare(l.size() - tail.size(), tail.size(), tail) == 0;
          }))
        for (auto& kv : out) kv.second.resize(kv.second.size() - tail.size());
    }
    std::string prefix = out.begin()->second;
    for (const auto& kv : out) {
      std::size_t n = 0;
      while (n < prefix.size() && n < kv.second.size() && prefix[n] == kv.second[n]) ++n;
      prefix.resize(n);
    }
    const std::size_t cut = prefix.rfind('-');
    if (cut != std::string::npos && cut + 1 < out.begin()->second.size() &&
        all([&](const std::string& l) { return l.size() > cut + 1 && l.find('/') == std::string::npos; }))
      for (auto& kv : out) kv.second = kv.second.substr(cut + 1);
  }
  return out;
}

const std::string& run_label(const Context& c, const std::string& run) {
  const auto it = c.labels.find(run);
  return it == c.labels.end() ? run : it->second;
}

Section summary_section(Context& c) {
  const auto& v = c.doc.audit.verdict;
  Section s{"Verdict", {}};
  s.verdict(plain_answer(v));
  s.p("In the audit's terms: " + v.summary);
  if (const auto skipped = skipped_stages(c.doc.audit); !skipped.empty()) {
    std::string text = "Not run: ";
    for (std::size_t i = 0; i < skipped.size(); ++i) text += (i ? "; " : "") + skipped[i];
    s.p(text + ".");
  }
  Table t{{"link of the chain", "test", "comparison", "runs", "effect", "95 % CI", "p", "status"}, {}};
  const std::pair<const char*, const VerdictEvidence*> links[] = {
      {"1. dependence beyond confidence", &v.dependence},
      {"2. gain over the capacity-matched control", &v.primary},
      {"3. beyond the whole output vector", &v.beyond_outputs}};
  for (const auto& [link, e] : links)
    if (!e->test.empty())
      t.rows.push_back({link, evidence_row_test(*e), e->comparison, std::to_string(e->runs), evidence_effect(*e),
                        ci(e->effect_ci, 5), pval(e->p), e->status});
  if (std::isfinite(v.recovery))
    t.rows.push_back(
        {"sensitivity at the smallest effect",
         fmt::format("recovery R of an injected {} nats (threshold {})", v.sensitivity_effect, v.threshold),
         "full_vector", "", fmt::format("R = {:+.2f}", v.recovery), ci(v.recovery_ci, 2), "-", "-"});
  if (std::isfinite(v.class_recovery))
    t.rows.push_back(
        {"sensitivity, effect in one class",
         fmt::format("recovery R of an injected {} nats in each run's most frequent predicted class", v.class_effect),
         "full_vector", "", fmt::format("R = {:+.2f}", v.class_recovery), ci(v.class_recovery_ci, 2), "-", "-"});
  s.tab(t, fmt::format("The decision chain the verdict rests on (answer: {}; alpha = {} for each link, in this order; "
                       "smallest effect of interest {} nats). Effects in nats are log-loss gains, control minus probe "
                       "(positive: routing helps); G is the diagnostic's weighted accuracy gap between high- and "
                       "low-routing examples of matched confidence; link 3 is tested only when link 1 rejects.",
                       v.answer, v.alpha, v.smallest_effect));
  if (!v.secondary.empty()) {
    Table sec{{"secondary comparison", "runs", "gain [nats]", "95 % CI", "p", "p Holm (this family)"}, {}};
    for (const auto& e : v.secondary)
      sec.rows.push_back({e.comparison, std::to_string(e.runs), std::isfinite(e.effect) ? sgn(e.effect) : "-",
                          ci(e.effect_ci, 5), pval(e.p), pval(e.p_holm)});
    s.tab(sec,
          fmt::format("Secondary comparisons ({} tests, Holm within this family): reported beside the chain, never "
                      "a veto of its answer.",
                      v.secondary.size()));
  }
  const auto& a = c.doc.audit;
  std::string prov = "arcal " + (c.doc.has_study ? c.doc.study.version : std::string(ARCAL_VERSION)) +
                     "; results: " + c.results_path + "; report generated " + now_utc() + ".";
  if (c.doc.has_study) {
    std::set<std::uint64_t> seeds;
    for (const auto& r : c.doc.study.runs) seeds.insert(r.seed);
    std::string list;
    for (auto x : seeds) list += (list.empty() ? "" : ", ") + std::to_string(x);
    prov += " Study '" + c.doc.study.name + "' (" + c.doc.study.config_source + "), configuration hash " +
            c.doc.study.config_hash + ", training seeds " + list + ".";
  }
  prov += fmt::format(" Audit seed {}; {} runs audited.", a.diagnostic.options.seed, a.run_summaries.size());
  s.p(prov);
  return s;
}

Section training_section(Context& c) {
  const auto& st = c.doc.study;
  // The heading names the standard twin only when the study trained one.
  const bool twin = std::any_of(st.runs.begin(), st.runs.end(), [](const auto& r) { return r.residual == "standard"; });
  Section s{twin ? "Training runs: AttnRes and the standard twin" : "Training runs", {}};
  // Token traces (a language model's: clusters) have no median-unbiased ECE (the cluster bootstrap
  // gives the intervals), and their NLL is per next byte, so bits per byte is shown beside it.
  const bool tokens = std::any_of(st.runs.begin(), st.runs.end(), [](const auto& r) { return r.metrics.clusters > 0; });
  Table t{{"run", "residual", "seed", "n", "accuracy", "95 % CI", "ECE-15 (bias-corrected)", "95 % CI",
           "ECE-15 plug-in", "NLL", "Brier", "AUROC", "train s"},
          {}};
  if (tokens)
    t.header = {"run",
                "residual",
                "seed",
                "tokens (sequences)",
                "next-byte accuracy",
                "95 % CI",
                "ECE-15",
                "95 % CI",
                "NLL",
                "bits per byte",
                "95 % CI",
                "Brier",
                "train s"};
  std::vector<RelPanel> panels;
  for (const auto& r : st.runs) {
    const auto& m = r.metrics;
    const std::string secs = std::isfinite(r.train_seconds) ? fmt::format("{:.0f}", r.train_seconds) : "-";
    if (tokens) {
      const double l2 = std::log(2.0);
      t.rows.push_back({r.id, r.residual, std::to_string(r.seed), fmt::format("{} ({})", m.n, m.clusters),
                        f4(m.accuracy.value), ci(m.accuracy.ci), f4(m.ece.value), ci(m.ece.ci), f4(m.nll.value),
                        f4(m.nll.value / l2), ci({m.nll.ci.low / l2, m.nll.ci.high / l2}), f4(m.brier.value), secs});
    } else {
      t.rows.push_back({r.id, r.residual, std::to_string(r.seed), std::to_string(m.n), f4(m.accuracy.value),
                        ci(m.accuracy.ci), f4(m.ece.bias_corrected), ci(m.ece.ci), f4(m.ece.value), f4(m.nll.value),
                        f4(m.brier.value), f4(m.auroc.value), secs});
    }
    panels.push_back({fmt::format("{} (n = {})", r.id, m.n), {{"accuracy per bin", rel_points(m)}}});
  }
  s.tab(t, tokens
               ? "Metrics of every trained run on its token trace of the " + st.split +
                     " split (every next-byte prediction of the traced sequences; intervals: the cluster bootstrap, "
                     "whole sequences resampled, ECE around its upward-biased plug-in value; docs/method.md §6.9)."
               : "Metrics of every trained run on its traced " + st.split +
                     " split (accuracy: percentile bootstrap; ECE: the median-unbiased estimate with the interval from "
                     "inverting the consistency test, beside the upward-biased plug-in value; docs/method.md §4).");
  c.csv.push_back({"training.csv", t});
  Table m{{"model / residual", "seeds", "accuracy mean", "sd", "ECE-15 mean", "sd"}, {}};
  for (const auto& g : st.groups)
    m.rows.push_back({g.model + " / " + g.residual, std::to_string(g.seeds), f4(g.accuracy_mean), f4(g.accuracy_sd),
                      f4(g.ece_mean), f4(g.ece_sd)});
  s.tab(m, "Across seeds (sample sd; n/a with one seed).");
  const int bins = st.runs.empty() ? 15 : st.runs.front().metrics.bins;
  reliability_figure(c.figures, "reliability_runs", "Reliability per run", panels, bins);
  s.fig(
      "reliability_runs",
      fmt::format("Reliability diagram of every run ({} equal-width bins; n per panel): accuracy per bin against mean "
                  "confidence, the grey band where a calibrated model's accuracy falls in 95 % of draws, and the "
                  "examples per bin as bars (right axis).",
                  bins));
  return s;
}

Section runs_section(Context& c) {
  Section s{"Runs", {}};
  Table t{{"run", "n", "accuracy", "mean confidence", "ECE", "routing explained by the predicted class (adj. η²)"}, {}};
  std::vector<RelPanel> panels;
  int bins = 15;
  double most_explained = -1;
  for (const auto& r : c.doc.audit.run_summaries) {
    t.rows.push_back({run_label(c, r.run), std::to_string(r.n), f4(r.accuracy), f4(r.mean_confidence), f4(r.ece),
                      std::isfinite(r.class_explained)
                          ? fmt::format("{:.2f} ({})", r.class_explained, r.tertile_statistic)
                          : "n/a"});
    if (std::isfinite(r.class_explained)) most_explained = std::max(most_explained, r.class_explained);
    panels.push_back(
        {fmt::format("{} (n = {})", run_label(c, r.run), r.n), {{"accuracy per bin", rel_points(r.reliability)}}});
    bins = int(r.bins);
  }
  s.tab(t);
  // A large vocabulary is read in the reduced output form (method.md §6.3): say what "the outputs" were.
  std::set<std::string> reduced;
  for (const auto& r : c.doc.audit.run_summaries)
    if (read_in_reduced_form(r)) reduced.insert(r.outputs);
  if (most_explained >= 0.5)
    s.p(fmt::format(
        "The predicted class explains up to {:.0f} % of the routing statistic's variance: the routing largely "
        "encodes which class (token) was predicted, which is an output. {}",
        100.0 * most_explained,
        reduced.empty() ? "The probes read the predicted class beside routing, so that part is not a gain where each "
                          "class has enough examples for its calibration to be learnt from the outputs; where classes "
                          "have few examples each, the exact null (arcal audit --exact-null), which permutes routing "
                          "only within each predicted class, separates the two for independent examples (method.md "
                          "§6.3, §6.6)."
                        : "In the reduced output form the probes read routing centred within each predicted class, so "
                          "that part is not counted as a gain: the gain is about how routing varies among examples of "
                          "one predicted class (method.md §6.3)."));
  for (const auto& o : reduced)
    s.p("The outputs the probes and the exact null condition on were read in the " + o +
        " (method.md §6.3, the reduced output form): \"beyond the outputs\" means beyond these.");
  reliability_figure(c.figures, "reliability_runs", "Reliability per run", panels, bins);
  s.fig("reliability_runs",
        fmt::format("Reliability diagram of every audited run ({} equal-width bins; grey: a calibrated "
                    "model's 95 % band; bars: examples per bin).",
                    bins));
  return s;
}

Section routing_section(Context& c) {
  Section s{"Routing", {}};
  std::vector<RelPanel> panels;
  Table t{{"run", "statistic", "tertile", "n", "accuracy", "ECE"}, {}};
  const char* names[3] = {"low", "middle", "high"};
  int bins = 15;
  for (const auto& r : c.doc.audit.run_summaries) {
    if (r.tertile_statistic.empty()) continue;
    RelPanel p{fmt::format("{} by {} (n = {})", run_label(c, r.run), r.tertile_statistic, r.n), {}};
    for (std::size_t g = 0; g < 3; ++g) {
      p.series.push_back(
          {fmt::format("{} tertile (n = {})", names[g], r.tertile_n[g]), rel_points(r.tertile_reliability[g])});
      t.rows.push_back({run_label(c, r.run), r.tertile_statistic, names[g], std::to_string(r.tertile_n[g]),
                        f4(r.tertile_accuracy[g]), f4(r.tertile_ece[g])});
    }
    panels.push_back(p);
    bins = int(r.bins);
  }
  if (!panels.empty()) {
    reliability_figure(c.figures, "reliability_tertiles", "Reliability per routing tertile", panels, bins);
    s.fig("reliability_tertiles",
          "Reliability within the low, middle and high tertile of the first audited routing statistic (tertiles of the "
          "whole run; ties kept together); bars: examples per bin in each tertile. Tertiles differ in confidence too, "
          "so a difference here is not yet evidence: the diagnostic below matches on confidence.");
    s.tab(t);
    c.csv.push_back({"tertiles.csv", t});
  }
  std::vector<HeatPanel> heat;
  bool depth = false;
  for (const auto& r : c.doc.audit.run_summaries)
    if (!r.routing_mean.empty() && !r.experts) {  // expert routing has its own section (experts_section)
      heat.push_back({fmt::format("{} (n = {})", run_label(c, r.run), r.n), r.points, r.sources, r.routing_sources,
                      r.routing_mean});
      depth = true;
    }
  if (!heat.empty() && depth) {
    heatmap_figure(c.figures, "routing_heatmap", "Mean routing weight (token mean, averaged over examples)", heat);
    s.fig("routing_heatmap",
          "Mean routing weight per routing point (rows) and source (columns) on a log colour scale "
          "(weights below 0.001 share the darkest colour); blank cells are past the point's sources.");
  }
  return s;
}

Section convergence_section(Context& c) {
  const auto& pts = c.doc.study.convergence;
  Section s{"Convergence: the audit along training", {}};
  s.p("The same runs audited at several points of training: each audited run's model after the listed epochs "
      "(kept as RUN/epoch-E), traced on the same split and audited with the same options as the final models (the "
      "last row). Does the answer depend on when training stopped?");
  Table t{{"epoch", "runs", "test accuracy (mean, sd)", "answer", "dependence p", "exact-null gain", "probe gain",
           "95 % CI", "p", "beyond outputs p", "recovery R", "95 % CI"},
          {}};
  CurveSeries across{"probe gain over capacity-matched control, across runs (95 % CI)", {}, {}, {}, {}};
  CurveSeries exact{"exact-null real mean gain (confidence matching)", {}, {}, {}, {}};
  for (const auto& p : pts) {
    const auto& v = p.verdict;
    t.rows.push_back({std::to_string(p.epoch), std::to_string(p.runs),
                      fmt::format("{} ({})", pct(p.accuracy_mean), pct(p.accuracy_sd)), v.answer, pval(v.dependence.p),
                      evidence_effect(v.dependence), sgn(v.primary.effect), ci(v.primary.effect_ci, 5),
                      pval(v.primary.p), pval(v.beyond_outputs.p),
                      std::isfinite(v.recovery) ? fmt::format("{:.2f}", v.recovery) : "-", ci(v.recovery_ci, 2)});
    if (std::isfinite(v.primary.effect)) {
      across.x.push_back(p.accuracy_mean);
      across.y.push_back(v.primary.effect);
      across.low.push_back(v.primary.effect_ci.low);
      across.high.push_back(v.primary.effect_ci.high);
    }
    if (std::isfinite(v.dependence.effect) && v.dependence.test == "exact_null.conditional_permutation") {
      exact.x.push_back(p.accuracy_mean);
      exact.y.push_back(v.dependence.effect);
    }
  }
  s.tab(t,
        "Each row is a full audit (docs/method.md §6); gains in nats, positive: routing helps; p of the exact null is "
        "its conditional-permutation p (floor 1/(replicates + 1)).");
  c.csv.push_back({"convergence.csv", t});
  std::vector<CurveSeries> series;
  if (!across.x.empty()) series.push_back(across);
  if (!exact.x.empty()) series.push_back(exact);
  if (!series.empty()) {
    curves_figure(c.figures, "convergence", "Routing's gain along training", "mean test accuracy of the audited runs",
                  "log-loss gain [nats]", series, false, 0.0);
    s.fig("convergence",
          fmt::format("The gains of the verdict's evidence against the audited runs' mean test accuracy, "
                      "one point per audited epoch ({} points, {} runs each); dashed: no gain.",
                      pts.size(), pts.empty() ? 0 : pts.front().runs));
  }
  return s;
}

Section configuration_section(Context& c) {
  Section s{"Configuration", {}};
  s.p("The resolved study (arcal run --config FILE reproduces it; every run directory also holds its config.json):");
  s.code(c.doc.study.config_toml);
  return s;
}

Document build_document(Context& c) {
  if (c.doc.kind == ResultsDocument::Kind::intervene) return intervention_document(c);
  if (c.doc.kind != ResultsDocument::Kind::audit) return calibration_document(c);
  Document d;
  d.title = c.doc.has_study ? "arcal report: " + c.doc.study.name : std::string("arcal audit report");
  d.sections.push_back(summary_section(c));
  std::vector<std::string> ids;
  for (const auto& r : c.doc.audit.run_summaries) ids.push_back(r.run);
  c.labels = run_labels(ids);
  // With a study the training section shows every run (and its reliability figure); without one, the
  // runs section shows the audited runs. (An `else` that bound to the convergence test drew the
  // reliability figure twice.)
  if (c.doc.has_study) d.sections.push_back(training_section(c));
  if (c.doc.has_study && !c.doc.study.convergence.empty()) d.sections.push_back(convergence_section(c));
  if (!c.doc.has_study && !c.doc.audit.run_summaries.empty()) d.sections.push_back(runs_section(c));
  if (std::any_of(c.doc.audit.run_summaries.begin(), c.doc.audit.run_summaries.end(),
                  [](const RunSummary& r) { return bool(r.experts); }))
    d.sections.push_back(experts_section(c));
  // The first screens end here: the verdict and the runs. Every test's tables and figures follow as
  // the appendix (issue 56: a report a researcher forwards reads as a few screens, then the detail).
  Section appendix{kAppendixTitle, {}};
  appendix.p(
      "The sections below are the evidence in detail: each test's tables and figures, in the order of the "
      "decision chain above. The tables are also in tables/*.csv, every figure's data and gnuplot script in "
      "figures/.");
  d.sections.push_back(std::move(appendix));
  if (!c.doc.audit.run_summaries.empty()) {
    auto s = routing_section(c);
    if (!s.blocks.empty()) d.sections.push_back(std::move(s));
  }
  d.sections.push_back(diagnostic_section(c));
  if (c.doc.audit.options.run_condcal && !c.doc.audit.condcal.empty()) d.sections.push_back(condcal_section(c));
  if (c.doc.audit.has_probes) d.sections.push_back(probes_section(c));
  if (c.doc.audit.has_sensitivity) d.sections.push_back(sensitivity_section(c));
  if (c.doc.audit.has_exact_null) d.sections.push_back(exact_null_section(c));
  if (c.doc.has_study) d.sections.push_back(configuration_section(c));
  return d;
}

}  // namespace arcal::report
