// Checkpoints and trained models on disk: the atomic archive writer, the model identity every
// checkpoint and model.pt record (configuration and hash, checked on load with every tensor's shape),
// exact-resume checkpoints (weights, AdamW state, step, fp16 loss scale), the training log's
// append/truncate, and load_trained_model (train/trainer.hpp). Used by the training loop (trainer.cpp).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "model/ar_vit.hpp"
#include "model/config.hpp"

namespace arcal {

/// fp16 loss-scaler state; part of the checkpoint so an fp16 run resumes exactly.
struct LossScaler {
  double scale = 1.0;
  std::int64_t clean_steps = 0;
};

/// Serialises `archive` in memory and writes it with write_file_atomic: LibTorch's file writer throws
/// from its destructor on a full disk (std::terminate, rc 134, the temporary left behind); here a
/// full disk is an error naming the path and ENOSPC, the temporary is removed and the previous file
/// stays as it was.
void save_archive_atomic(torch::serialize::OutputArchive& archive, const std::string& path);

/// Records the model configuration (JSON) and its hash in `archive` (checked by every load).
void write_model_identity(torch::serialize::OutputArchive& archive, const ModelConfig& mc);

/// RUN/checkpoint.pt: identity, weights, optimizer state, step and loss scale, written atomically.
void save_checkpoint(ARViT& model, torch::optim::AdamW& opt, std::int64_t step, const LossScaler& scaler,
                     const std::string& path);

/// Reads a checkpoint of save_checkpoint onto `device` after checking its identity and shapes;
/// returns its step (InputError for an unreadable file, a foreign model, or a step outside [0, total]).
std::int64_t load_checkpoint(ARViT& model, torch::optim::AdamW& opt, const std::string& path,
                             const torch::Device& device, LossScaler& scaler, std::int64_t total);

/// Keeps the log's records up to `step` (a resumed run re-does what came after its checkpoint).
void truncate_log(const std::string& path, std::int64_t step);

/// Appends one line to RUN/log.jsonl, never through a link or into a file with a second name
/// (core/ownership.hpp); a failed write is an error, not a silently shorter log.
void append_line(const std::string& path, const std::string& line);

}  // namespace arcal
