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
  const std::vector<std::pair<const char*, const Estimate*>> rows = {
      {"accuracy", &r.accuracy}, {"ece", &r.ece},         {"mce", &r.mce},
      {"rmsce", &r.rmsce},       {"ada_ece", &r.ada_ece}, {"classwise_ece", &r.classwise_ece},
      {"debiased_ece", &r.debiased_ece}, {"smece", &r.smece}, {"smece_sigma", &r.smece_sigma},
      {"nll", &r.nll},           {"brier", &r.brier},     {"auroc", &r.auroc}};
  nlohmann::json j;
  j["n"] = r.n;
  j["classes"] = r.classes;
  j["bins"] = r.bins;
  j["bootstrap"] = r.draws;
  j["seed"] = r.seed;
  j["level"] = r.level;
  j["debiased_ece_clipped"] = r.debiased_clipped;
  nlohmann::json ci = nlohmann::json::object(), corrected = nlohmann::json::object();
  for (const auto& [name, e] : rows) {
    j[name] = value_json(e->value);
    ci[name] = ci_json(e->ci);
    if (!std::isnan(e->bias_corrected)) corrected[name] = e->bias_corrected;
  }
  j["ci"] = ci;
  j["bias_corrected"] = corrected;
  j["intervals"] =
      "accuracy, nll, brier, auroc: percentile bootstrap; ece, rmsce, ada_ece, classwise_ece, smece: basic "
      "(bias-corrected) bootstrap for the population value, clipped at 0 and starting at 0 when the consistency "
      "test does not reject calibration (the plug-in value is biased upward and may lie above its interval); "
      "debiased_ece: percentile interval of the debiased squared error, square-rooted, same zero rule; mce and "
      "smece_sigma: none";
  j["consistency"] = {{"draws", r.consistency_draws},
                      {"p_top_label", value_json(r.consistency_p)},
                      {"p_classwise", value_json(r.classwise_consistency_p)},
                      {"null", "labels redrawn from the model's own probabilities (a calibrated model)"}};
  nlohmann::json rel = nlohmann::json::array();
  for (const auto& b : r.reliability) rel.push_back({{"n", b.n}, {"conf", b.mean_conf}, {"acc", b.accuracy}});
  j["reliability"] = rel;
  return j;
}

}  // namespace arcal
