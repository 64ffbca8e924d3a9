// The JSON form of a CalibrationReport (the keys of `arcal metrics --json`, docs/interface.md), shared
// by `arcal metrics` and `arcal run` so both write the same object.
#pragma once

#include <nlohmann/json.hpp>

#include "calib/metrics.hpp"

namespace arcal {

/// n, classes, bins, bootstrap, seed, level, debiased_ece_clipped, every metric
/// (null where undefined), ci {metric: [low, high] or null}, reliability [{n, conf, acc}] (15 rows).
nlohmann::json calibration_report_json(const CalibrationReport& report);

}  // namespace arcal
