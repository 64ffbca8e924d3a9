// The calibration report of a trace file, from whichever output form it holds: the whole vector (logits
// or probs: calibration_report) or the top-k form of a large vocabulary (calibration_report_top_label:
// every metric but classwise ECE, which is then NaN). Shared by `arcal metrics` and `arcal run`.
#pragma once

#include <nlohmann/json.hpp>

#include "calib/metrics.hpp"
#include "io/trace.hpp"

namespace arcal {

CalibrationReport trace_calibration_report(const Trace& trace, const ReportOptions& options);

/// The `arcal metrics --json` object of a trace's report: calibration_report_json, and for the top-k form
/// `outputs` saying what the trace holds and why classwise_ece is null.
nlohmann::json trace_calibration_report_json(const Trace& trace, const CalibrationReport& report);

}  // namespace arcal
