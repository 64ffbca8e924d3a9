// Image data as tensors (used by training, tracing and interventions; in src/data so that model/
// does not depend on train/). In memory: normalised float images (N,C,H,W) and int64 labels, the seeded
// train/validation split, and batch augmentation (random crop with zero padding in pixel space,
// horizontal flip) driven by arcal's own seeded RNG so a resumed run sees the same batches.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "io/image_data.hpp"

namespace arcal {

struct TensorData {
  torch::Tensor images;  ///< (N,C,H,W) float32, normalised per channel
  torch::Tensor labels;  ///< (N) int64
  int classes = 0;
  std::int64_t size() const { return labels.size(0); }
};

struct DatasetSplits {
  TensorData train, val, test;
  std::string name;
};

/// Loads fashion-mnist, cifar10 or cifar100 and splits off a seeded `val_fraction` of the training
/// set (class-agnostic random permutation). `train_subset` > 0 keeps the first that many of the
/// remaining training examples (after the permutation). Throws InputError for an unknown dataset.
DatasetSplits load_dataset(const std::string& name, const std::string& data_dir, double val_fraction,
                           std::int64_t train_subset, std::uint64_t seed);

/// Default data directory for a dataset ("" when it has none).
std::string default_data_dir(const std::string& dataset);

/// Converts uint8 pixels to normalised floats with the dataset's channel means and stds.
TensorData to_tensor_data(const ImageSet& set, const std::string& dataset);

/// Random crop (pad `pad` with zero pixels) and horizontal flip of a batch (B,C,H,W), seeded.
torch::Tensor augment_batch(const torch::Tensor& batch, int pad, std::uint64_t seed, const std::string& dataset);

}  // namespace arcal
