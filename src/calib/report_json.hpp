// The JSON form of a CalibrationReport (the keys of `arcal metrics --json`, docs/interface.md), shared
// by `arcal metrics` and `arcal run` so both write the same object.
#pragma once

#include <nlohmann/json.hpp>

#include "calib/metrics.hpp"

namespace arcal {

/// The `schema` string of the object (docs/schema/metrics.schema.json).
inline constexpr const char* kMetricsSchema = "arcal.metrics/1";
/// The schema of `arcal calibrate --json` (docs/schema/calibrate.schema.json): the metrics before and after.
inline constexpr const char* kCalibrateSchema = "arcal.calibrate/1";

/// schema, n, classes, bins, bootstrap, seed, level, debiased_ece_clipped, every metric (null where
/// undefined), ci {metric: [low, high] or null}, bias_corrected, intervals, consistency, reliability
/// [{n, confidence, accuracy, conf, acc}] (one row per equal-width bin; null means in an empty bin).
nlohmann::json calibration_report_json(const CalibrationReport& report);

}  // namespace arcal
