// The `study` section that `arcal run` adds to the audit's results.json (docs/interface.md "arcal
// run"), as typed structs with their one to_json/from_json, and the reader of the embedded `arcal
// metrics --json` object (CalibrationReport; the writer is calib/report_json.hpp, whose keys this
// reader accepts in both namings: confidence/accuracy and the older conf/acc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/metrics.hpp"
#include "calib/report_json.hpp"
#include "results/json_fields.hpp"
#include "results/verdict.hpp"

namespace arcal {

/// One trained run of a study and the calibration metrics of its traced split.
struct StudyRunResult {
  std::string id, dir, dataset, model, residual;
  std::uint64_t seed = 0;
  bool audited = false;  ///< its trace entered the audit (AttnRes runs; standard twins do not)
  std::string trace, config_hash;
  double train_seconds = std::numeric_limits<double>::quiet_NaN();
  double images_per_second = std::numeric_limits<double>::quiet_NaN();
  CalibrationReport metrics;
};

/// Accuracy and ECE of one (model, residual mode) over its seeds: mean and sample sd (NaN with one seed).
struct StudyGroup {
  std::string model, residual;
  std::size_t seeds = 0;
  double accuracy_mean = 0, accuracy_sd = 0, ece_mean = 0, ece_sd = 0;
};

/// One point of the convergence audit: the audited runs' models after `epoch` epochs (their snapshots,
/// or the final models at the study's last epoch), their test accuracy and the verdict of their audit.
struct ConvergencePoint {
  std::uint64_t epoch = 0;
  std::size_t runs = 0;
  double accuracy_mean = 0, accuracy_sd = 0;  ///< over the audited runs (sd NaN with one)
  std::string audit_dir;                      ///< relative to the study directory
  Verdict verdict;
};

struct StudyResults {
  std::string name, config_hash, config_toml, config_source, version, split, audit_dir;
  double wall_seconds_this_invocation = 0.0;
  std::vector<StudyRunResult> runs;
  std::vector<StudyGroup> groups;  ///< summarise_groups(runs), in first-seen order
  /// The convergence audit ([train] snapshot_epochs), in epoch order, ending with the final models.
  std::vector<ConvergencePoint> convergence;
};

/// One StudyGroup per (model, residual) in first-seen order.
std::vector<StudyGroup> summarise_groups(const std::vector<StudyRunResult>& runs);

inline void to_json(nlohmann::json& j, const StudyGroup& g) {
  j = {{"model", g.model},
       {"residual", g.residual},
       {"seeds", g.seeds},
       {"accuracy_mean", results::number_or_null(g.accuracy_mean)},
       {"accuracy_sd", results::number_or_null(g.accuracy_sd)},
       {"ece_mean", results::number_or_null(g.ece_mean)},
       {"ece_sd", results::number_or_null(g.ece_sd)}};
}
inline void from_json(const nlohmann::json& j, StudyGroup& g) {
  results::get_to(j, "model", g.model);
  results::get_to(j, "residual", g.residual);
  results::get_to(j, "seeds", g.seeds);
  results::get_number(j, "accuracy_mean", g.accuracy_mean);
  results::get_number(j, "accuracy_sd", g.accuracy_sd);
  results::get_number(j, "ece_mean", g.ece_mean);
  results::get_number(j, "ece_sd", g.ece_sd);
}

/// Reads an `arcal metrics --json` object (values and intervals; null reads as NaN).
inline void from_json(const nlohmann::json& j, CalibrationReport& r) {
  results::get_to(j, "n", r.n);
  results::get_to(j, "classes", r.classes);
  results::get_to(j, "bins", r.bins);
  r.draws = results::value_or(j, "bootstrap", 0);
  r.clusters = results::value_or<std::size_t>(j, "clusters", 0);
  r.seed = results::value_or<std::uint64_t>(j, "seed", 0);
  r.level = results::value_or(j, "level", 0.95);
  const auto& ci = j.at("ci");
  const auto corrected = j.find("bias_corrected");
  for (const auto& [name, member] : kReportMetrics) {
    Estimate* e = &(r.*member);
    results::get_number(j, name, e->value);
    if (ci.contains(name))
      results::get_interval(ci, name, e->ci);
    else
      e->ci = {std::nan(""), std::nan("")};
    e->bias_corrected =
        corrected != j.end() && corrected->contains(name) ? corrected->at(name).get<double>() : std::nan("");
  }
  r.debiased_clipped = results::value_or(j, "debiased_ece_clipped", false);
  if (const auto c = j.find("consistency"); c != j.end() && c->is_object()) {
    r.consistency_draws = results::value_or(*c, "draws", 0);
    r.consistency_p = results::value_or(*c, "p_top_label", std::nan(""));
    r.classwise_consistency_p = results::value_or(*c, "p_classwise", std::nan(""));
  }
  r.reliability.clear();
  for (const auto& b : j.at("reliability")) {
    BinRow row;
    results::get_to(b, "n", row.n);
    results::get_number(b, b.contains("confidence") ? "confidence" : "conf", row.mean_conf);
    results::get_number(b, b.contains("accuracy") ? "accuracy" : "acc", row.accuracy);
    r.reliability.push_back(row);
  }
  r.has_smooth = j.contains("smooth_reliability");
  if (r.has_smooth) {
    const auto& m = j.at("smooth_reliability");
    results::get_number(m, "sigma", r.smooth.sigma);
    results::get_to(m, "draws", r.smooth.draws);
    results::get_number(m, "level", r.smooth.level);
    results::get_to(m, "t", r.smooth.t);
    results::get_to(m, "accuracy", r.smooth.accuracy);
    results::get_to(m, "low", r.smooth.low);
    results::get_to(m, "high", r.smooth.high);
    results::get_to(m, "density", r.smooth.density);
  }
}

inline void to_json(nlohmann::json& j, const StudyRunResult& r) {
  j = {{"id", r.id},
       {"dir", r.dir},
       {"dataset", r.dataset},
       {"model", r.model},
       {"residual", r.residual},
       {"seed", r.seed},
       {"audited", r.audited},
       {"trace", r.trace},
       {"config_hash", r.config_hash},
       {"train_seconds", results::number_or_null(r.train_seconds)},
       {"images_per_second", results::number_or_null(r.images_per_second)},
       {"metrics", calibration_report_json(r.metrics)}};
}
inline void from_json(const nlohmann::json& j, StudyRunResult& r) {
  results::get_to(j, "id", r.id);
  results::get_to(j, "dir", r.dir);
  results::get_to(j, "dataset", r.dataset);
  results::get_to(j, "model", r.model);
  results::get_to(j, "residual", r.residual);
  results::get_to(j, "seed", r.seed);
  results::get_to(j, "audited", r.audited);
  results::get_to(j, "trace", r.trace);
  results::get_to(j, "config_hash", r.config_hash);
  r.train_seconds = results::value_or(j, "train_seconds", std::nan(""));
  r.images_per_second = results::value_or(j, "images_per_second", std::nan(""));
  results::get_to(j, "metrics", r.metrics);
}
inline void to_json(nlohmann::json& j, const ConvergencePoint& p) {
  j = {{"epoch", p.epoch},
       {"runs", p.runs},
       {"accuracy_mean", results::number_or_null(p.accuracy_mean)},
       {"accuracy_sd", results::number_or_null(p.accuracy_sd)},
       {"audit_dir", p.audit_dir},
       {"verdict", p.verdict}};
}
inline void from_json(const nlohmann::json& j, ConvergencePoint& p) {
  results::get_to(j, "epoch", p.epoch);
  results::get_to(j, "runs", p.runs);
  results::get_number(j, "accuracy_mean", p.accuracy_mean);
  results::get_number(j, "accuracy_sd", p.accuracy_sd);
  results::get_to(j, "audit_dir", p.audit_dir);
  results::get_to(j, "verdict", p.verdict);
}

inline void to_json(nlohmann::json& j, const StudyResults& s) {
  j = {{"name", s.name},
       {"config_hash", s.config_hash},
       {"config_toml", s.config_toml},
       {"config_source", s.config_source},
       {"version", s.version},
       {"split", s.split},
       {"audit_dir", s.audit_dir},
       {"wall_seconds_this_invocation", s.wall_seconds_this_invocation},
       {"runs", s.runs},
       {"groups", s.groups},
       {"convergence", s.convergence}};
}
inline void from_json(const nlohmann::json& j, StudyResults& s) {
  results::get_to(j, "name", s.name);
  results::get_to(j, "config_hash", s.config_hash);
  results::get_to(j, "config_toml", s.config_toml);
  results::get_to(j, "config_source", s.config_source);
  results::get_to(j, "version", s.version);
  results::get_to(j, "split", s.split);
  results::get_to(j, "audit_dir", s.audit_dir);
  results::get_number(j, "wall_seconds_this_invocation", s.wall_seconds_this_invocation);
  results::get_to(j, "runs", s.runs);
  results::get_to(j, "groups", s.groups);
  results::get_to(j, "convergence", s.convergence);
}

}  // namespace arcal
