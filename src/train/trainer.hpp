// Training one model (arcal train): configuration, the loop (cross-entropy + beta * SB-ECE,
// AdamW, cosine schedule with linear warm-up, augmentation), evaluation, atomic checkpoints and
// exact resume. RUN/ holds config.json, checkpoint.pt, model.pt, log.jsonl, summary.json.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "model/ar_vit.hpp"
#include "data/tensor_data.hpp"
#include "train/train_config.hpp"
#include "results/train_json.hpp"

namespace arcal {

/// `schema` strings of RUN/summary.json (also `arcal train --json`) and of each log.jsonl record
/// (docs/schema/train_summary.schema.json, train_log.schema.json).
inline constexpr const char* kTrainLogSchema = "arcal.train_log/1";

/// check_train_config (train/train_config.hpp), plus: --device cuda needs a CUDA LibTorch and device.
/// Throws InputError naming the flag (before any file is written).
void validate_train_config(const TrainConfig& c);

/// Model configuration implied by a training configuration and its dataset's image geometry.
ModelConfig model_config_for(const TrainConfig& c, int image_size, int channels, int classes);

/// What `arcal train --dry-run` prints: the resolved model (preset, geometry, routing points and
/// sources), its parameter count (counted on the built model) and its cost per image
/// (model/cost.hpp). Reads no data: the dataset's geometry is known from its name.
nlohmann::json describe_model(const TrainConfig& c);

struct EvalResult {
  std::int64_t n = 0;
  double accuracy = 0, nll = 0, ece = 0;
  double loss = 0;           ///< CE + beta * SB-ECE over the whole set
  double bits_per_byte = 0;  ///< text: nll / ln 2 (n, accuracy, nll and ece are then per next-token prediction)
};

/// Batch size of evaluate() and of the trace `arcal train --trace` writes (arcal trace's default).
inline constexpr int kEvalBatchSize = 500;

/// Evaluates on a split in batches (no gradients); on a text split every next-token prediction.
EvalResult evaluate(ARViT& model, const TensorData& data, int batch_size = kEvalBatchSize);

/// Top-label ECE with 15 equal-width bins (method.md §4) of logits (N,K) against labels.
double top_label_ece(const torch::Tensor& logits, const torch::Tensor& labels, int bins = 15);

struct TrainEvents {
  /// Called after every step: step, total steps, epoch, loss, batch accuracy, images/s.
  std::function<void(std::int64_t, std::int64_t, int, double, double, double)> on_step;
  /// Called with each log.jsonl record.
  std::function<void(const nlohmann::json&)> on_eval;
  /// Called with a human line (resume notices etc.).
  std::function<void(const std::string&)> on_message;
};

/// Trains into run_dir. With resume, continues from run_dir/checkpoint.pt using run_dir/config.json
/// (config is then ignored except for threads). Returns summary.json's content.
/// Under WORLD_SIZE > 1 (torchrun variables, train/distributed.hpp) every rank calls this: rank r
/// trains on slice r of the global batch (batch_size x world_size, the same order and augmentation
/// as one process with that batch), gradients are averaged every step, and only rank 0 writes
/// files or calls `events`; the other ranks return {"rank": r}. All ranks read the checkpoint on
/// resume, so RUN/ must be on a file system they share.
/// What the command line asked of a resumed run: the train-config keys it gave (flag names with
/// '_': "lr", "max_steps") and those --override allows to change. On resume a given value that
/// differs from config.json is refused unless overridden; overridden values are applied from the
/// checkpoint's step on and recorded in config.json ("resume_overrides").
struct ResumeRequest {
  std::vector<std::string> given;
  std::vector<std::string> overrides;
};

/// The files arcal train writes in RUN/ (config.json, checkpoint.pt, model.pt, log.jsonl, summary.json,
/// .lock), as paths under `run_dir`: what an output of another command must never replace.
std::vector<std::string> run_directory_files(const std::string& run_dir);

/// `arcal train --trace FILE`: after the last step the training process writes the trace that
/// `arcal trace --run RUN --split SPLIT --sequences N --out FILE` would write (the same arrays and
/// metadata, bitwise), from the model in memory: no second process, data load or model load. On the
/// test split of an image dataset the trace's forward pass is also the summary's test evaluation,
/// so the test split is run once instead of twice. Written (atomically) after model.pt and before
/// summary.json.
struct TraceRequest {
  std::string path;              ///< "" = no trace
  std::string split = "test";    ///< test | val
  std::int64_t sequences = 512;  ///< text runs: evenly spaced sequences traced (0 = all)
};

/// The trace file's metadata (its `meta` JSON) for split `split` of a run trained with `config` in
/// `run_dir`: `traced` is what was traced, `full` the whole split (they differ for a text split cut
/// to evenly spaced sequences); as_attnres as in LoadOptions.
nlohmann::json trace_metadata(const TrainConfig& config, const std::string& run_dir, const std::string& split,
                              const TensorData& traced, const TensorData& full, const std::string& as_attnres);

/// Rank 0 holds RUN/.lock (core/run_lock.hpp) for the whole run: a second process on the same RUN/
/// is refused naming the holder. SIGINT/SIGTERM (after install_interrupt_handlers) stop the run
/// between steps with a checkpoint and throw Interrupted. RUN/ existing as a file, a missing RUN/
/// with --resume, and a refused start leave nothing behind (a RUN/ created here is removed).
/// With a non-empty trace.path, rank 0 also writes that trace (TraceRequest).
nlohmann::json train_run(const TrainConfig& config, const std::string& run_dir, bool resume,
                         const TrainEvents& events = {}, const ResumeRequest& request = {},
                         const TraceRequest& trace = {});

struct LoadOptions {
  /// "" loads the run as trained. "full" or "block" loads a standard-residual run as AttnRes with
  /// every pseudo-query 0 and every RMS gain 1: the routing-equivalent wrapper of method.md §1,
  /// whose routing is exactly 1/S_p and whose logits equal the standard model's (exactly at ε = 0).
  std::string as_attnres;
  int block_size = 2;      ///< for as_attnres == "block"
  double norm_eps = -1.0;  ///< >= 0 overrides the run's norm epsilon (the equivalence check uses 0)
};

/// Loads RUN/config.json and RUN/model.pt into a model in eval mode. Throws InputError for a
/// missing or unreadable run, or as_attnres on a run that is not standard-residual.
ARViT load_trained_model(const std::string& run_dir, TrainConfig* config_out = nullptr,
                         const LoadOptions& options = {});

}  // namespace arcal
