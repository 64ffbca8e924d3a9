// libFuzzer target: the calibrator JSON reader of `arcal calibrate --params` and
// Calibrator.from_dict (the capped JSON parser, then calibrator_from_json), and the calibrator it
// accepts applied to a fixed set of predictions: whatever is accepted must give probabilities
// (finite, in [0, 1], rows summing to 1), since an accepted calibrator is trusted from then on.
#include <cmath>

#include "calib/fitted_calibrator.hpp"
#include "core/text_input.hpp"
#include "fuzz_common.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return arcal::fuzz::expect_input_error_only([&] {
    const nlohmann::json j = arcal::parse_json_text(text, "--params", "calibrator parameters");
    const arcal::FittedCalibrator c = arcal::calibrator_from_json(j, "--params fuzz.json");
    const std::size_t n = 7, k = c.classes;
    if (k < 2 || k > 1000) return;  // the reader bounds K; a wider K only costs time here
    std::vector<double> logits(n * k);
    for (std::size_t i = 0; i < n * k; ++i) logits[i] = 6.0 * std::sin(0.7 * double(i) + 0.3) * double(i % 5);
    const auto p = arcal::predictions_from_logits(std::move(logits), n, k, "fuzz");
    const auto q = arcal::apply_calibrator(c, p);
    ARCAL_ASSERT(q.size() == n * k, "calibrated probabilities have shape [n, k]");
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0.0;
      for (std::size_t m = 0; m < k; ++m) {
        const double v = q[i * k + m];
        ARCAL_ASSERT(std::isfinite(v) && v >= 0.0 && v <= 1.0, "an accepted calibrator gives probabilities");
        s += v;
      }
      ARCAL_ASSERT(std::fabs(s - 1.0) < 1e-6, "calibrated rows sum to 1");
    }
  });
}
