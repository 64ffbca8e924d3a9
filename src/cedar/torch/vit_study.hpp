// CEDAR inside a trained arcal ViT (`arcal cedar-study --run RUN`): the model's test split through
// every attention layer with dense attention, hard top-k, summary-only and CEDAR at equal exact-chunk
// budgets (chunks: the CLS token as an always-exact sink, then one image row of patches each), and
// each arm's accuracy, NLL, ECE, over-confidence and ECE after a temperature fitted on the dense
// model's validation split, with bootstrap intervals and paired differences against dense.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calib/metrics.hpp"

namespace arcal::cedar {

struct ModelStudyConfig {
  std::string run;                             ///< run directory of arcal train (a ViT preset)
  std::vector<std::int64_t> budgets{1, 2, 4};  ///< exact row chunks per query
  std::int64_t subset = 0;                     ///< first N test (and validation) images (0 = the whole splits)
  int batch_size = 250;
  int threads = 0;       ///< kernel and LibTorch threads (0 = the hardware's)
  int bootstrap = 1000;  ///< resamples for every interval (paired: the same resamples for every arm)
  std::uint64_t seed = 0;
};

/// One arm: a method at a budget (dense: every chunk exact; summary: B = 0).
struct ModelArm {
  std::string method;
  std::int64_t budget = 0;
  double mean_expanded = 0;  ///< exact row chunks per (layer, image, head, query), the CLS sink not counted
  Estimate accuracy, nll, ece, overconfidence, ece_ts;  ///< overconfidence = mean confidence - accuracy
  /// Paired against dense on the same resamples: arm minus dense.
  Estimate d_accuracy, d_nll, d_ece, d_overconfidence;
  double agreement = 0;  ///< fraction of images with dense's prediction
  double mean_kl = 0;    ///< mean KL(p_dense || p_arm), nats
  double seconds = 0;    ///< attention kernel time over the split
};

struct ModelStudyResult {
  ModelStudyConfig config;
  nlohmann::json model;  ///< the run's model configuration
  std::int64_t tokens = 0, chunks = 0, n = 0, classes = 0;
  std::vector<std::int64_t> chunk_starts;
  double temperature_beta = 1;  ///< fitted on the dense model's validation logits (softmax(beta z))
  std::int64_t n_val = 0;
  double dense_vs_standard_max_abs = 0;  ///< max |logit| difference of the dense backend and LibTorch's product
  std::vector<ModelArm> arms;            ///< dense first
  double seconds = 0;
};

/// Runs the study. progress(done, total) in images over all arms. Throws InputError for a missing
/// run, a Swin run, or budgets outside [1, rows].
ModelStudyResult run_model_study(const ModelStudyConfig& config,
                                 const std::function<void(std::int64_t, std::int64_t)>& progress = {});

nlohmann::json model_study_json(const ModelStudyResult& result);
std::string model_study_csv(const ModelStudyResult& result);
std::string model_study_markdown(const ModelStudyResult& result);

}  // namespace arcal::cedar
