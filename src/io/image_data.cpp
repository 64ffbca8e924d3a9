#include "io/image_data.hpp"

#include <zlib.h>

#include <cstdio>
#include <fstream>

#include "core/check.hpp"

namespace arcal {

namespace {

/// Whole file through zlib (gzread reads plain files transparently).
std::vector<std::uint8_t> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw_input("read_idx", path + ": cannot open (missing file? set --data-dir)");
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> buf(1 << 20);
  for (;;) {
    int got = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (got < 0) {
      int errnum = 0;
      std::string msg = gzerror(f, &errnum);
      gzclose(f);
      throw_input("read_idx", path + ": corrupt or truncated gzip stream (" + msg + ")");
    }
    if (got == 0) break;
    out.insert(out.end(), buf.begin(), buf.begin() + got);
  }
  // gzread returns 0 with an error set when the stream ends early.
  int errnum = 0;
  const char* msg = gzerror(f, &errnum);
  if (errnum != Z_OK && errnum != Z_STREAM_END) {
    std::string m = msg;
    gzclose(f);
    throw_input("read_idx", path + ": corrupt or truncated gzip stream (" + m + ")");
  }
  gzclose(f);
  return out;
}

std::uint32_t be32(const std::vector<std::uint8_t>& d, std::size_t off) {
  return (std::uint32_t(d[off]) << 24) | (std::uint32_t(d[off + 1]) << 16) | (std::uint32_t(d[off + 2]) << 8) |
         std::uint32_t(d[off + 3]);
}

}  // namespace

ImageSet read_idx_pair(const std::string& images_path, const std::string& labels_path, int classes) {
  const auto img = read_gz(images_path);
  const auto lab = read_gz(labels_path);
  if (img.size() < 16) throw_input("read_idx", images_path + ": file is " + std::to_string(img.size()) + " bytes, shorter than the 16-byte IDX header");
  if (lab.size() < 8) throw_input("read_idx", labels_path + ": file is " + std::to_string(lab.size()) + " bytes, shorter than the 8-byte IDX header");
  if (be32(img, 0) != 0x00000803)
    throw_input("read_idx", images_path + ": magic number is " + std::to_string(be32(img, 0)) + ", but must be 2051 (IDX uint8 images)");
  if (be32(lab, 0) != 0x00000801)
    throw_input("read_idx", labels_path + ": magic number is " + std::to_string(be32(lab, 0)) + ", but must be 2049 (IDX uint8 labels)");
  ImageSet s;
  s.n = be32(img, 4);
  s.height = static_cast<int>(be32(img, 8));
  s.width = static_cast<int>(be32(img, 12));
  s.channels = 1;
  s.classes = classes;
  const std::size_t n_labels = be32(lab, 4);
  if (n_labels != s.n)
    throw_input("read_idx", labels_path + " holds " + std::to_string(n_labels) + " labels but " + images_path +
                                " holds " + std::to_string(s.n) + " images");
  const std::size_t pix = s.n * std::size_t(s.height) * std::size_t(s.width);
  if (img.size() != 16 + pix)
    throw_input("read_idx", images_path + ": " + std::to_string(img.size() - 16) + " pixel bytes, but the header promises " + std::to_string(pix) + " (truncated file?)");
  if (lab.size() != 8 + s.n)
    throw_input("read_idx", labels_path + ": " + std::to_string(lab.size() - 8) + " label bytes, but the header promises " + std::to_string(s.n) + " (truncated file?)");
  s.pixels.assign(img.begin() + 16, img.end());
  s.labels.resize(s.n);
  for (std::size_t i = 0; i < s.n; ++i) {
    s.labels[i] = lab[8 + i];
    check_label("read_idx", (labels_path + ": labels").c_str(), i, s.labels[i], classes);
  }
  return s;
}

ImageSet load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  return read_idx_pair(prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz", 10);
}

ImageSet read_cifar_files(const std::vector<std::string>& files, bool cifar100) {
  const std::size_t label_bytes = cifar100 ? 2 : 1;
  const std::size_t record = label_bytes + 3072;
  ImageSet s;
  s.channels = 3;
  s.height = s.width = 32;
  s.classes = cifar100 ? 100 : 10;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw_input("load_cifar", path + ": cannot open (missing file? set --data-dir)");
    std::vector<std::uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (data.empty() || data.size() % record != 0)
      throw_input("load_cifar", path + ": size " + std::to_string(data.size()) + " bytes is not a positive multiple of the " +
                                    std::to_string(record) + "-byte record (" + (cifar100 ? "CIFAR-100" : "CIFAR-10") + " binary version?)");
    const std::size_t count = data.size() / record;
    for (std::size_t r = 0; r < count; ++r) {
      const std::uint8_t* rec = data.data() + r * record;
      const std::int64_t y = rec[label_bytes - 1];
      check_label("load_cifar", (path + ": labels").c_str(), r, y, s.classes);
      s.labels.push_back(y);
      s.pixels.insert(s.pixels.end(), rec + label_bytes, rec + record);
    }
    s.n += count;
  }
  return s;
}

ImageSet load_cifar(const std::string& dir, bool cifar100, bool train) {
  std::vector<std::string> files;
  if (cifar100) {
    files.push_back(dir + (train ? "/train.bin" : "/test.bin"));
  } else if (train) {
    for (int i = 1; i <= 5; ++i) files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  } else {
    files.push_back(dir + "/test_batch.bin");
  }
  return read_cifar_files(files, cifar100);
}

}  // namespace arcal
