// IDX (gzip'd, via zlib) and CIFAR binary readers on small files the test writes, plus the error
// table: missing, truncated and wrong-magic files must throw InputError naming the file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/image_data.hpp"
#include "test_util.hpp"

using namespace arcal;
namespace fs = std::filesystem;

namespace {

std::string tmpdir(const std::string& name) { return arcal::testing::fresh_dir(name); }

void put_be32(std::vector<std::uint8_t>& v, std::uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<std::uint8_t>(x >> s));
}

void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

/// n images of h x w with pixel (i, r, c) = (i * 7 + r * w + c) % 256 and labels i % 10.
void write_idx(const std::string& dir, const std::string& prefix, std::uint32_t n, std::uint32_t h, std::uint32_t w,
               std::uint32_t img_magic = 2051, std::uint32_t lab_magic = 2049, std::size_t drop_pixels = 0) {
  std::vector<std::uint8_t> img, lab;
  put_be32(img, img_magic);
  put_be32(img, n);
  put_be32(img, h);
  put_be32(img, w);
  for (std::uint32_t i = 0; i < n; ++i)
    for (std::uint32_t p = 0; p < h * w; ++p) img.push_back(static_cast<std::uint8_t>((i * 7 + p) % 256));
  img.resize(img.size() - drop_pixels);
  put_be32(lab, lab_magic);
  put_be32(lab, n);
  for (std::uint32_t i = 0; i < n; ++i) lab.push_back(static_cast<std::uint8_t>(i % 10));
  write_gz(dir + "/" + prefix + "-images-idx3-ubyte.gz", img);
  write_gz(dir + "/" + prefix + "-labels-idx1-ubyte.gz", lab);
}

}  // namespace

TEST(Idx, ReadsWhatWasWritten) {
  auto d = tmpdir("idx_ok");
  write_idx(d, "train", 12, 4, 5);
  write_idx(d, "t10k", 3, 4, 5);
  auto s = load_fashion_mnist(d, true);
  EXPECT_EQ(s.n, 12u);
  EXPECT_EQ(s.height, 4);
  EXPECT_EQ(s.width, 5);
  ASSERT_EQ(s.pixels.size(), 12u * 20u);
  EXPECT_EQ(s.pixels[3 * 20 + 2], (3 * 7 + 2) % 256);
  EXPECT_EQ(s.labels[11], 1);
  EXPECT_EQ(load_fashion_mnist(d, false).n, 3u);
}

TEST(Idx, ReadsDebianFashionMnistWhenInstalled) {
  if (!fs::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist not installed";
  auto s = load_fashion_mnist(kFashionMnistDir, false);
  EXPECT_EQ(s.n, 10000u);
  EXPECT_EQ(s.height, 28);
  // The Fashion-MNIST test set is balanced: 1000 per class.
  std::vector<int> counts(10);
  for (auto y : s.labels) counts[static_cast<std::size_t>(y)]++;
  for (int c : counts) EXPECT_EQ(c, 1000);
}

TEST(Idx, ErrorsNameTheFileAndConstraint) {
  auto d = tmpdir("idx_bad");
  EXPECT_NE(arcal::testing::input_error_message([&] {
              load_fashion_mnist(d, true);
            }).find("train-images-idx3-ubyte.gz: cannot open"),
            std::string::npos);
  write_idx(d, "train", 4, 3, 3, /*img_magic=*/2049);
  EXPECT_NE(arcal::testing::input_error_message([&] {
              load_fashion_mnist(d, true);
            }).find("magic number is 2049, but must be 2051"),
            std::string::npos);
  write_idx(d, "train", 4, 3, 3, 2051, 2049, /*drop_pixels=*/5);
  EXPECT_NE(arcal::testing::input_error_message([&] {
              load_fashion_mnist(d, true);
            }).find("31 pixel bytes, but the header promises 36"),
            std::string::npos);
  // A gzip stream cut in the middle.
  write_idx(d, "train", 40, 8, 8);
  auto path = d + "/train-images-idx3-ubyte.gz";
  auto size = fs::file_size(path);
  fs::resize_file(path, size / 2);
  auto msg = arcal::testing::input_error_message([&] { load_fashion_mnist(d, true); });
  EXPECT_NE(msg.find("train-images-idx3-ubyte.gz"), std::string::npos) << msg;
}

TEST(Cifar, ReadsBinaryRecordsOfBothVersions) {
  auto d = tmpdir("cifar");
  {
    std::ofstream f(d + "/c10.bin", std::ios::binary);
    for (int r = 0; r < 3; ++r) {
      f.put(static_cast<char>(r + 4));
      for (int p = 0; p < 3072; ++p) f.put(static_cast<char>((r + p) % 256));
    }
    std::ofstream g(d + "/c100.bin", std::ios::binary);
    for (int r = 0; r < 2; ++r) {
      g.put(static_cast<char>(r));       // coarse
      g.put(static_cast<char>(90 + r));  // fine
      for (int p = 0; p < 3072; ++p) g.put(static_cast<char>((2 * r + p) % 256));
    }
  }
  auto a = read_cifar_files({d + "/c10.bin", d + "/c10.bin"}, false);
  EXPECT_EQ(a.n, 6u);
  EXPECT_EQ(a.channels, 3);
  EXPECT_EQ(a.labels[2], 6);
  EXPECT_EQ(a.pixels[2 * 3072 + 1024], (2 + 1024) % 256);  // record 2, first green pixel
  auto b = read_cifar_files({d + "/c100.bin"}, true);
  EXPECT_EQ(b.n, 2u);
  EXPECT_EQ(b.classes, 100);
  EXPECT_EQ(b.labels[1], 91);  // the fine label
  // A CIFAR-100 file read as CIFAR-10 has the wrong record size.
  auto msg = arcal::testing::input_error_message([&] { read_cifar_files({d + "/c100.bin"}, false); });
  EXPECT_NE(msg.find("c100.bin: size 6148 bytes is not a positive multiple of the 3073-byte record"), std::string::npos)
      << msg;
  // Labels out of range for CIFAR-10.
  {
    std::ofstream f(d + "/badlabel.bin", std::ios::binary);
    f.put(static_cast<char>(12));
    for (int p = 0; p < 3072; ++p) f.put(0);
  }
  msg = arcal::testing::input_error_message([&] { read_cifar_files({d + "/badlabel.bin"}, false); });
  EXPECT_NE(msg.find("labels[0] is 12, but must be in [0, 9]"), std::string::npos) << msg;
}
