#include "calib/report_json.hpp"

#include <cmath>

namespace arcal {

namespace {
nlohmann::json ci_json(const Interval& ci) {
  if (std::isnan(ci.low)) return nullptr;
  return nlohmann::json::array({ci.low, ci.high});
}
nlohmann::json value_json(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }
}  // namespace

nlohmann::json calibration_report_json(const CalibrationReport& r) {
  nlohmann::json j;
  j["schema"] = kMetricsSchema;
  j["n"] = r.n;
  j["classes"] = r.classes;
  j["bins"] = r.bins;
  j["bootstrap"] = r.draws;
  if (r.clusters > 0) j["clusters"] = r.clusters;
  j["seed"] = r.seed;
  j["level"] = r.level;
  j["debiased_ece_clipped"] = r.debiased_clipped;
  nlohmann::json ci = nlohmann::json::object(), corrected = nlohmann::json::object();
  for (const auto& [name, member] : kReportMetrics) {
    const Estimate* e = &(r.*member);
    j[name] = value_json(e->value);
    ci[name] = ci_json(e->ci);
    if (!std::isnan(e->bias_corrected)) corrected[name] = e->bias_corrected;
  }
  j["ci"] = ci;
  j["bias_corrected"] = corrected;
  j["intervals"] =
      r.clusters > 0
          ? "cluster bootstrap (whole clusters resampled with replacement, method.md section 6.8): percentile "
            "intervals for accuracy, nll, brier, auroc, ece, rmsce, ada_ece and debiased_ece (the errors' intervals "
            "lie around their upward-biased plug-in values); smece: relplot's basic bootstrap over the first 100 "
            "resamples (not coverage-validated); classwise_ece, mce "
            "and smece_sigma: none; no "
            "consistency test (its label redraws assume independent examples)"
          : "accuracy, nll, brier, auroc: percentile bootstrap; ece, rmsce, ada_ece, classwise_ece, debiased_ece: "
            "inversion of the consistency test along the scaled-gap family (labels ~ Bern(p + lambda d), lower end "
            "from the noise-shrunk gaps and 0 when the consistency test does not reject at 2.5 %, upper end from the "
            "raw gaps; the interval is for the population value and may lie below the upward-biased plug-in value; "
            "bias_corrected is the median-unbiased member); smece: relplot's basic bootstrap (2 smece - the "
            "percentiles, clipped at 0) "
            "over the first 100 resamples (sigma* searched in each), not coverage-validated (method.md section 4); mce "
            "and smece_sigma: none (method.md section 4)";
  j["consistency"] = {{"draws", r.consistency_draws},
                      {"p_top_label", value_json(r.consistency_p)},
                      {"p_classwise", value_json(r.classwise_consistency_p)},
                      {"null", "labels redrawn from the model's own probabilities (a calibrated model)"}};
  // confidence/accuracy are the audit's names; conf/acc (the same values) stay for existing scripts
  // (deprecated, docs/interface.md). An empty bin has no mean: null, not 0.
  nlohmann::json rel = nlohmann::json::array();
  for (const auto& b : r.reliability) {
    const nlohmann::json conf = b.n ? nlohmann::json(b.mean_conf) : nlohmann::json(nullptr);
    const nlohmann::json acc = b.n ? nlohmann::json(b.accuracy) : nlohmann::json(nullptr);
    rel.push_back({{"n", b.n}, {"confidence", conf}, {"accuracy", acc}, {"conf", conf}, {"acc", acc}});
  }
  j["reliability"] = rel;
  if (r.has_smooth) {
    const auto& m = r.smooth;
    j["smooth_reliability"] = {{"sigma", m.sigma},
                               {"draws", m.draws},
                               {"level", m.level},
                               {"t", m.t},
                               {"accuracy", m.accuracy},
                               {"low", m.low},
                               {"high", m.high},
                               {"density", m.density},
                               {"estimator",
                                "relplot's smooth reliability diagram: kernel regression of correctness on "
                                "confidence, Gaussian kernel reflected at 0 and 1, bandwidth smECE's sigma*; "
                                "band: percentile bootstrap of the curve at the same sigma"}};
  }
  return j;
}

}  // namespace arcal
