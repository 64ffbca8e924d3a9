// Training data as tensors (used by training, tracing and interventions; in src/data so that model/
// does not depend on train/). Images: normalised float images (N,C,H,W) and int64 labels, the seeded
// train/validation split, and batch augmentation (random crop with zero padding in pixel space,
// horizontal flip) driven by arcal's own seeded RNG so a resumed run sees the same batches. Text (the
// language model, issue 27): byte sequences of the dict-gcide corpus split by document.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/image_data.hpp"

namespace arcal {

struct TensorData {
  torch::Tensor images;  ///< (N,C,H,W) float32, normalised per channel; text: (N, T+1) uint8 byte sequences
  torch::Tensor labels;  ///< (N) int64; text: the document each sequence starts in (its cluster's origin)
  int classes = 0;       ///< K; text: 256 (one token per byte)
  bool text = false;     ///< a text corpus: sequence s predicts images[s, 1..T] from images[s, 0..T-1]
  std::int64_t size() const { return labels.size(0); }
};

/// Text data: the model's input tokens (B,T) int64 and next-token targets (B,T) int64 of byte
/// sequences (B, T+1).
torch::Tensor lm_inputs(const torch::Tensor& sequences);
torch::Tensor lm_targets(const torch::Tensor& sequences);

/// Whether a dataset name is a text corpus ("gcide") rather than images.
bool is_text_dataset(const std::string& name);

struct DatasetSplits {
  TensorData train, val, test;
  std::string name;
};

/// Loads fashion-mnist, cifar10 or cifar100 and splits off a seeded `val_fraction` of the training
/// set (class-agnostic random permutation). `train_subset` > 0 keeps the first that many of the
/// remaining training examples (after the permutation). Throws InputError for an unknown dataset.
/// "gcide" is the text corpus (load_text_dataset with `context` tokens per sequence).
DatasetSplits load_dataset(const std::string& name, const std::string& data_dir, double val_fraction,
                           std::int64_t train_subset, std::uint64_t seed, int context = 128);

/// The seed of the text corpus' document split: fixed, so every run (whatever its seed) has the same
/// validation and test documents for a given val_fraction.
inline constexpr std::uint64_t kTextSplitSeed = 0x6C1DE;

/// The language model's data (io/text_corpus.hpp): dict-gcide's entries (from data_dir/gcide.dict.dz
/// and gcide.index, default /usr/share/dictd) split by document with the fixed kTextSplitSeed:
/// val_fraction of the documents to validation, as many to test, the rest to training; each split
/// packed into sequences of context + 1 bytes (no sequence crosses a split). `train_subset` > 0 keeps
/// that many training sequences (a choice seeded by `seed`). Throws InputError for a missing corpus, a fraction outside
/// (0, 0.25], context < 2, or an empty split.
DatasetSplits load_text_dataset(const std::string& data_dir, double val_fraction, std::int64_t train_subset,
                                std::uint64_t seed, int context);

/// Default data directory for a dataset ("" when it has none).
std::string default_data_dir(const std::string& dataset);

/// Converts uint8 pixels to normalised floats with the dataset's channel means and stds.
TensorData to_tensor_data(const ImageSet& set, const std::string& dataset);

/// Random crop (pad `pad` with zero pixels) and horizontal flip of a batch (B,C,H,W), seeded.
torch::Tensor augment_batch(const torch::Tensor& batch, int pad, std::uint64_t seed, const std::string& dataset);

}  // namespace arcal
