// CEDAR in a trained language model's causal prefill (`arcal cedar-lm --run RUN`, issue 28): the
// test documents concatenated to contexts of L tokens, every causal attention layer run by dense
// attention, summaries only, hard top-k and CEDAR at equal exact-chunk budgets (fixed chunks of C
// tokens; chunk 0 a sink and each query's own chunk always exact), and each arm's bits per byte,
// next-byte NLL, ECE and over-confidence with cluster-bootstrap intervals (whole sequences
// resampled) and paired differences against dense; then the attention kernel's time per layer on the
// model's own layer-0 q/k/v against our dense kernel and LibTorch's product, in one run.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calib/metrics.hpp"

namespace arcal::cedar {

struct LmStudyConfig {
  std::string run;                                      ///< run directory of arcal train (ar-lm-tiny or -nope)
  std::vector<std::int64_t> contexts{512, 1024, 2048};  ///< prefill lengths L for the quality table
  std::vector<std::int64_t> budgets{2, 4, 8};           ///< exact chunks per query (cedar, topk)
  std::int64_t chunk = 64;                              ///< tokens per chunk
  std::int64_t tokens = 32768;  ///< test tokens scored per context (whole sequences, at least 2)
  /// Prefill lengths of the kernel-time table (one sequence each); empty = none.
  std::vector<std::int64_t> timing_contexts{2048, 8192, 32768};
  std::int64_t timing_budget = 8;  ///< B of the kernel-time table
  /// Also run summary-only and CEDAR without the second-order (variance) term of the summary score:
  /// the ablation that shows what that term does on this model's keys (method.md §8).
  bool first_order_arms = false;
  int threads = 0;  ///< kernel and LibTorch threads (0 = the hardware's)
  int bootstrap = 1000;
  std::uint64_t seed = 0;
};

/// One arm at one context.
struct LmArm {
  std::string method;
  std::int64_t budget = 0;
  bool second_order = true;  ///< false: the first-order ablation of summary/cedar
  double mean_expanded = 0;  ///< exact chunks per (layer, sequence, head, query), sink and own chunk not counted
  Estimate bits_per_byte, nll, ece, overconfidence, accuracy;
  Estimate d_bits_per_byte, d_ece, d_overconfidence;  ///< arm minus dense on the same resamples
  double agreement = 0;                               ///< fraction of tokens with dense's top-1 prediction
  double mean_kl = 0;                                 ///< mean KL(p_dense || p_arm) per token, nats
  double layer_seconds = 0;                           ///< attention kernel seconds per layer and sequence
};

struct LmContext {
  std::int64_t context = 0, sequences = 0, tokens = 0, chunks = 0;
  bool beyond_training = false;  ///< longer than the model's training context (NoPE only)
  std::vector<LmArm> arms;       ///< dense first
};

/// Kernel time per layer on the model's own layer-0 q/k/v, causal prefill, one sequence of L tokens.
struct LmTiming {
  std::int64_t context = 0, chunks = 0;
  double dense_seconds = 0, libtorch_seconds = 0, cedar_seconds = 0, topk_seconds = 0, summary_seconds = 0;
  double cedar_error = 0, topk_error = 0, summary_error = 0;  ///< relative output error against dense
  double cedar_mean_expanded = 0;
  double libtorch_vs_dense_error = 0;  ///< LibTorch's product against our dense kernel
};

struct LmStudyResult {
  LmStudyConfig config;
  nlohmann::json model;
  std::int64_t training_context = 0;
  bool learned_positions = true;
  std::vector<std::int64_t> skipped_contexts;  ///< beyond learned positions: the model cannot run them
  std::vector<LmContext> contexts;
  std::vector<LmTiming> timings;
  int threads = 0;
  double seconds = 0;
};

/// Runs the study. progress(done, total) counts forward passes. Throws InputError for a missing run,
/// a run that is not a language model, budgets < 1, a chunk < 1, or contexts the corpus cannot fill.
LmStudyResult run_lm_study(const LmStudyConfig& config,
                           const std::function<void(std::int64_t, std::int64_t)>& progress = {});

nlohmann::json lm_study_json(const LmStudyResult& result);  ///< schema arcal.cedar_lm/1
std::string lm_study_csv(const LmStudyResult& result);
std::string lm_study_markdown(const LmStudyResult& result);

}  // namespace arcal::cedar
