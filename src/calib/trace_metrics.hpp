// The calibration report of a trace file, from whichever output form it holds: the whole vector (logits
// or probs: calibration_report) or the top-k form of a large vocabulary (calibration_report_top_label:
// every metric but classwise ECE, which is then NaN). Shared by `arcal metrics` and `arcal run`.
#pragma once

#include "calib/metrics.hpp"
#include "io/trace.hpp"

namespace arcal {

CalibrationReport trace_calibration_report(const Trace& trace, const ReportOptions& options);

}  // namespace arcal
