// The configuration of one training run (every `arcal train` flag), its JSON form in RUN/config.json,
// and the std-only reader of RUN/config.json (train + model sections) with typed, range-checked
// fields. Standard library and nlohmann-json only: compiled into arcal_std so the config readers
// are fuzzed without LibTorch (tests/fuzz). The LibTorch-side checks (CUDA) are in trainer.hpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/options.hpp"
#include "model/config.hpp"

namespace arcal {

struct TrainConfig {
  std::string dataset = "fashion-mnist";
  std::string data_dir;  ///< "" = the dataset's default location
  std::string model = "ar-vit-tiny";
  std::string residual = "full";
  int block_size = 2;
  int epochs = 10;
  std::int64_t max_steps = 0;     ///< 0 = no cap; otherwise stop (and end the schedule) here
  std::int64_t train_subset = 0;  ///< 0 = the whole training split
  int batch_size = 128;
  double lr = 1e-3;
  double weight_decay = 0.05;
  double warmup_fraction = 0.05;  ///< of the total steps
  double sbece_weight = 0.5;
  int sbece_bins = 15;
  double sbece_temperature = 0.01;
  double val_fraction = 0.05;
  std::uint64_t seed = 0;
  int threads = 1;
  std::string device = "cpu";
  std::string precision = "fp32";       ///< fp32 | bf16 | fp16 | auto: autocast dtype of the training forward pass
  int world_size = 1;                   ///< data-parallel ranks (from WORLD_SIZE); batch_size is per rank
  std::int64_t checkpoint_every = 200;  ///< steps; a checkpoint is also written at every epoch end
  double norm_eps = 1e-6;
  int patch = 0;      ///< > 0: the ViT presets' patch size instead of the preset's (more tokens per image)
  int context = 128;  ///< language model (dataset gcide): tokens per sequence
  /// Epochs after which the model is also kept as RUN/epoch-E/ (config.json, model.pt): a run
  /// directory of its own that `arcal trace` reads, for the convergence audit of `arcal run`.
  std::vector<std::uint64_t> snapshot_epochs;

  std::int64_t steps_per_epoch(std::int64_t train_size) const { return train_size / batch_size; }
};

/// The training family's option table: `arcal train`'s flags, the study file's [data]/[model]/[train]
/// keys (Option::section), RUN/config.json's "train" object and the run identity (options_hash:
/// every option that changes what is trained; paths, threads, device and checkpoint cadence do not).
const OptionTable<TrainConfig>& train_option_table();

/// "auto" precision: "bf16" on a CPU device whose processor computes bf16 natively (AVX512-BF16 or
/// AMX-BF16, where LibTorch's bf16 autocast is 1.5x faster than fp32 for AR-ViT-tiny, docs/perf-log.md),
/// else "fp32"; any other value is returned unchanged. Runs record the resolved value (config.json,
/// run hashes), so a run's configuration reproduces it on any machine.
std::string resolve_precision(const std::string& precision, const std::string& device);
/// True when this processor has native bf16 arithmetic (x86-64: AVX512-BF16 or AMX-BF16).
bool cpu_has_native_bf16();

/// options_json of train_option_table().
void to_json(nlohmann::json& j, const TrainConfig& c);
/// Throws InputError naming the key for a mistyped or out-of-range field (missing keys keep their
/// defaults, for configs written by older versions).
void from_json(const nlohmann::json& j, TrainConfig& c);
/// from_json with `where` ("RUN/config.json: train") leading every message.
TrainConfig train_config_from_json(const nlohmann::json& j, const std::string& where);

/// Ranges and names of every field (core/limits.hpp ranges, the flag's name in the message).
/// Throws InputError naming the flag. Needs no LibTorch (validate_train_config adds the CUDA check).
void check_train_config(const TrainConfig& c);

/// `schema` of RUN/config.json (docs/schema/train_config.schema.json). Runs written before it was
/// added have none and are read as version 1.
inline constexpr const char* kTrainConfigSchema = "arcal.train_config/1";

/// RUN/config.json: {"schema": ..., "train": ..., "model": ..., "version": ..., "parameters": ...}.
struct RunConfig {
  TrainConfig train;
  ModelConfig model;
  nlohmann::json json;  ///< the whole document (resume history and other keys are kept)
};

/// Parses a run's config.json text (size and nesting limits, typed fields, ranges, a `schema` other
/// than kTrainConfigSchema refused by name); `path` names the file in messages. Throws InputError.
RunConfig parse_run_config_text(const std::string& text, const std::string& path);
/// Reads and parses RUN/config.json (InputError for a missing, oversized or invalid file).
RunConfig read_run_config(const std::string& path);

/// Train-config keys that `arcal train --resume --override KEYS` may change (lr, epochs, ...); the
/// others fix the data, the model or the data order and can never change on resume.
const std::vector<std::string>& resume_overridable_keys();

}  // namespace arcal
