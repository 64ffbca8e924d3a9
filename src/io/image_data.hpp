// Image classification data as stored on disk: gzip'd IDX (MNIST / Fashion-MNIST, read via zlib)
// and the official CIFAR-10 / CIFAR-100 binary versions. Pixels stay uint8, channel-first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace arcal {

struct ImageSet {
  std::size_t n = 0;
  int channels = 0, height = 0, width = 0;
  int classes = 0;
  std::vector<std::uint8_t> pixels;  ///< [N, C, H, W]
  std::vector<std::int64_t> labels;  ///< [N]
};

/// Reads an IDX image file (magic 0x00000803) and label file (0x00000801), gzip'd or plain.
/// Throws InputError naming the file for a missing/truncated file, a wrong magic or a count mismatch,
/// an image side outside [1, 4096], or a file or image count beyond the array limit
/// (core/limits.hpp; checked before reading and while inflating, never after allocating).
ImageSet read_idx_pair(const std::string& images_path, const std::string& labels_path, int classes);

/// read_idx_pair on file contents in memory (gzip'd or plain); the paths only label messages.
ImageSet parse_idx_pair(const std::string& images, const std::string& labels, const std::string& images_path,
                        const std::string& labels_path, int classes);

/// Inflates a gzip stream (several concatenated members allowed) or returns plain bytes unchanged;
/// throws InputError naming `label` when it is corrupt or inflates to more than `limit` bytes.
std::string gunzip_capped(const std::string& bytes, const std::string& label, std::uint64_t limit);

/// Fashion-MNIST train or test split from a directory holding the four *-ubyte.gz files.
ImageSet load_fashion_mnist(const std::string& dir, bool train);

/// CIFAR-10 binary batches (cifar-10-batches-bin: data_batch_1..5.bin, test_batch.bin): records of
/// 1 label byte + 3072 pixel bytes. CIFAR-100 (cifar-100-binary: train.bin, test.bin): records of
/// coarse label byte + fine label byte + 3072 pixels; the fine label is used.
ImageSet load_cifar(const std::string& dir, bool cifar100, bool train);

/// Reads whole CIFAR binary files (used by load_cifar; exposed for tests). Files beyond the array
/// limit (core/limits.hpp) are refused before they are read.
ImageSet read_cifar_files(const std::vector<std::string>& files, bool cifar100);

/// Appends the records of one CIFAR file's contents to `set` (labels checked); `path` labels messages.
void append_cifar_bytes(ImageSet& set, const std::string& data, const std::string& path, bool cifar100);

/// Default directory of Debian's dataset-fashion-mnist package.
inline const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

}  // namespace arcal
