#include "calib/trace_metrics.hpp"

#include "calib/report_json.hpp"

namespace arcal {

CalibrationReport trace_calibration_report(const Trace& trace, const ReportOptions& options) {
  if (trace.topk == 0)
    return calibration_report(trace_probabilities(trace), trace.n, trace.classes, trace.labels, options);
  TraceTopLabel t = trace_top_label(trace);
  TopLabelRows rows{std::move(t.confidence), std::move(t.correct), std::move(t.nll), std::move(t.brier)};
  return calibration_report_top_label(rows, trace.classes, options);
}

nlohmann::json trace_calibration_report_json(const Trace& trace, const CalibrationReport& report) {
  nlohmann::json j = calibration_report_json(report);
  if (trace.topk > 0) j["outputs"] = trace_output_form(trace) + ": classwise_ece needs every class and is null";
  return j;
}

}  // namespace arcal
