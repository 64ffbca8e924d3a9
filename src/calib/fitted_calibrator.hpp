// One post-hoc calibrator as a value: fitted on one set of predictions, applied to another, and saved
// as JSON (schema "arcal.calibrator/1": what `arcal calibrate --save` writes and the Python module's
// Calibrator.to_dict returns) that reads back into a calibrator giving bit-identical outputs. The CLI
// and the Python module both go through this file, so a calibrator fitted by one applies the same way
// in the other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/calibrators.hpp"

namespace arcal {

inline constexpr const char* kCalibratorSchema = "arcal.calibrator/1";

/// The calibrators' settings (method.md §5); each method reads only its own.
struct CalibratorOptions {
  int bins = 15;              ///< histogram: equal-width bins (>= 1)
  int knots = 8;              ///< qats: knots of the temperature curve T(u) (>= 2)
  double l2 = 1e-4;           ///< vector, matrix: the ridge towards W = I, b = 0 (>= 0)
  double pseudo_count = 1.0;  ///< nw: weight of the prior, the mean correctness (>= 0)
};

/// Predictions of n examples over k classes as the calibrators read them, both row-major [n, k]: the
/// logits and the probabilities. From logits, probs = softmax(z); from probabilities, logits = log p
/// floored at 1e-300 (softmax(log p) = p), so every method applies to either.
struct Predictions {
  std::size_t n = 0, k = 0;
  std::vector<double> logits, probs;
};
/// Throws InputError naming `context` when the sizes do not match, a logit is not finite, or a
/// probability is outside [0, 1] or a row does not sum to 1 within 1e-4.
Predictions predictions_from_logits(std::vector<double> logits, std::size_t n, std::size_t k,
                                    const std::string& context = "calibrator");
Predictions predictions_from_probs(std::vector<double> probs, std::size_t n, std::size_t k,
                                   const std::string& context = "calibrator");
/// Rows idx of p, in the order given.
Predictions select_rows(const Predictions& p, const std::vector<std::size_t>& idx);

/// temperature, platt, isotonic, histogram, nw, qats, vector, matrix.
const std::vector<std::string>& calibrator_methods();

struct FittedCalibrator {
  std::string method;
  std::size_t classes = 0;  ///< K of the predictions it was fitted on (applying needs the same K)
  std::size_t n_fit = 0;    ///< examples it was fitted on
  CalibratorOptions options;
  TemperatureFit temperature;  ///< temperature
  PlattFit platt;              ///< platt
  IsotonicFit isotonic;        ///< isotonic
  HistogramFit histogram;      ///< histogram
  /// nw: 1-D Nadaraya-Watson on x = logit(confidence) of the fitted examples (the kernel estimator
  /// keeps its data), Scott bandwidth.
  std::vector<double> kernel_x, kernel_correct;
  double kernel_bandwidth = 0.0;
  QatsFit qats;             ///< qats
  LinearScalingFit linear;  ///< vector, matrix
  /// Set by fit_calibrator (not saved): why the fit should not be trusted, "" when nothing is wrong
  /// (the CLI prints it as a warning, the Python module raises a RuntimeWarning).
  std::string warning;
};

/// Fits on fewer examples than this are warned about (fit_warning); fewer than 2 are refused.
inline constexpr std::size_t kFewFitExamples = 50;

/// The fit's warning: fewer than kFewFitExamples examples, a binary method (platt, isotonic,
/// histogram, nw) fitted on one outcome only, an optimiser that did not converge (platt, qats, vector, matrix), or a
/// likelihood-fitted calibrator (temperature, vector, matrix) whose NLL on its own fitting data
/// is worse than the uncalibrated predictions'. "" when neither.
std::string fit_warning(const FittedCalibrator& f, const Predictions& p, const std::vector<std::int64_t>& labels);

/// Fits `method` on predictions p with labels [n] in [0, k). Throws InputError on an unknown method,
/// invalid options, labels or shapes; std::runtime_error when temperature scaling fails (beta <= 0 or
/// no convergence: never hidden).
FittedCalibrator fit_calibrator(const std::string& method, const Predictions& p,
                                const std::vector<std::int64_t>& labels, const CalibratorOptions& options = {});

/// Calibrated probabilities [n, k] of p. Throws InputError when p's k differs from the fitted one.
std::vector<double> apply_calibrator(const FittedCalibrator& calibrator, const Predictions& p);

/// schema, method, classes, n_calibration, options and the fitted parameters (keys per method in
/// docs/interface.md). Doubles are written with 17 significant digits, so reading back is exact.
nlohmann::json calibrator_json(const FittedCalibrator& calibrator);

/// The calibrator a calibrator_json object describes (extra keys are ignored). Throws InputError
/// naming `context` and the key on a wrong schema, unknown method, or a missing or malformed key.
FittedCalibrator calibrator_from_json(const nlohmann::json& j, const std::string& context = "calibrator");

}  // namespace arcal
