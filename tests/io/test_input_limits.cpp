// Size limits of the readers (issue 13): npy shapes whose byte size overflows or exceeds the array
// limit, zip members that declare more than their compressed bytes can hold or inflate past what they
// declare, gzip streams inflating past the cap, IDX headers promising more than the limit, and CIFAR
// data; every refusal is an InputError naming the file, the member and the limit, before allocating.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"
#include "io/image_data.hpp"
#include "io/npz.hpp"
#include "test_util.hpp"

using namespace arcal;

namespace {

std::string npy_header(const std::string& dict) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(h.size() & 0xFF);
  out += static_cast<char>(h.size() >> 8);
  return out + h;
}

/// An npz in memory, its members' declared uncompressed sizes replaced by `declared`.
std::string npz_with_declared_size(bool compress, std::uint32_t declared) {
  // One folder per test: ctest runs the tests of this file as parallel processes.
  const auto d = arcal::testing::fresh_dir(std::string("io/limits_zip/") +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
  write_npz(d + "/a.npz", {NpyArray::from_double("x", std::vector<double>(64, 0.0), {64})}, compress);
  std::string b = read_file(d + "/a.npz");
  for (const auto& [sig, off] : {std::pair<std::string, std::size_t>{"PK\x03\x04", 22}, {"PK\x01\x02", 24}})
    for (std::size_t i = b.find(sig); i != std::string::npos; i = b.find(sig, i + 4))
      std::memcpy(&b[i + off], &declared, 4);
  return b;
}

struct SmallLimits {
  InputLimits saved = input_limits();
  explicit SmallLimits(std::uint64_t bytes) {
    InputLimits l = saved;
    l.max_array_bytes = bytes;
    l.max_total_bytes = 2 * bytes;
    l.check_available_memory = false;
    set_input_limits(l);
  }
  ~SmallLimits() { set_input_limits(saved); }
};

}  // namespace

TEST(InputLimits, NpyShapeProductOverflowIsRefusedBeforeAllocating) {
  const auto img = npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }");
  const auto msg = arcal::testing::input_error_message([&] { parse_npy(img, "f.npz", "logits"); });
  EXPECT_NE(msg.find("npz: f.npz: array 'logits': shape (4294967296, 4294967296) of 8-byte elements overflows 64 bits"),
            std::string::npos)
      << msg;
  const auto digits = npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999,), }");
  EXPECT_NE(arcal::testing::input_error_message([&] { parse_npy(digits, "f.npz", "x"); }).find("overflows 64 bits"),
            std::string::npos);
}

TEST(InputLimits, NpyShapeBeyondTheArrayLimitNamesIt) {
  SmallLimits small(1 << 20);
  const auto img = npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1024, 1024), }");
  const auto msg = arcal::testing::input_error_message([&] { parse_npy(img, "f.npz", "routing"); });
  EXPECT_NE(
      msg.find("array 'routing': shape (1024, 1024) needs 4.0 MiB (4194304 bytes), more than the limit of 1.0 MiB"),
      std::string::npos)
      << msg;
  const auto u = npy_header("{'descr': '<U999999999999', 'fortran_order': False, 'shape': (), }");
  EXPECT_NE(
      arcal::testing::input_error_message([&] { parse_npy(u, "f.npz", "meta"); }).find("more characters per element"),
      std::string::npos);
}

TEST(InputLimits, ZipMemberDeclaringMoreThanItsBytesCanHold) {
  const auto stored = npz_with_declared_size(false, 0xFFFFFF00u);
  auto msg = arcal::testing::input_error_message([&] { read_npz_bytes(stored, "s.npz"); });
  EXPECT_NE(msg.find("s.npz: array 'x': declares 4.0 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("which a stored member cannot produce"), std::string::npos) << msg;
  // Within what deflate can produce but beyond the array limit: refused before allocating.
  SmallLimits small(100);
  msg = arcal::testing::input_error_message([&] { read_npz_bytes(npz_with_declared_size(true, 5000), "c.npz"); });
  EXPECT_NE(
      msg.find(
          "c.npz: array 'x': the member's declared size needs 4.9 KiB (5000 bytes), more than the limit of 100 bytes"),
      std::string::npos)
      << msg;
}

TEST(InputLimits, ZipMemberInflatingPastItsDeclaredSize) {
  const auto lying = npz_with_declared_size(true, 64);
  const auto msg = arcal::testing::input_error_message([&] { read_npz_bytes(lying, "l.npz"); });
  EXPECT_NE(msg.find("l.npz: array 'x': member inflates to more than the 64 bytes the archive declares"),
            std::string::npos)
      << msg;
}

TEST(InputLimits, GzipInflatingPastTheCap) {
  std::string zeros(1 << 20, '\0');
  uLongf n = compressBound(zeros.size()) + 64;
  std::string gz(n, '\0');
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  zs.next_in = reinterpret_cast<Bytef*>(zeros.data());
  zs.avail_in = static_cast<uInt>(zeros.size());
  zs.next_out = reinterpret_cast<Bytef*>(gz.data());
  zs.avail_out = static_cast<uInt>(gz.size());
  ASSERT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  gz.resize(zs.total_out);
  deflateEnd(&zs);
  EXPECT_EQ(gunzip_capped(gz, "z.gz", 1 << 20).size(), zeros.size());
  const auto msg = arcal::testing::input_error_message([&] { gunzip_capped(gz, "z.gz", 4096); });
  EXPECT_NE(msg.find("z.gz: inflates to more than the limit of 4.0 KiB"), std::string::npos) << msg;
  EXPECT_NE(arcal::testing::input_error_message([&] {
              gunzip_capped(gz.substr(0, gz.size() / 2), "z.gz", 1 << 21);
            }).find("corrupt or truncated gzip stream"),
            std::string::npos);
}

TEST(InputLimits, IdxHeaderPromisingMoreThanTheLimit) {
  auto be = [](std::uint32_t x) {
    std::string s(4, '\0');
    for (int k = 0; k < 4; ++k) s[std::size_t(k)] = static_cast<char>(x >> (24 - 8 * k));
    return s;
  };
  const std::string img = be(2051) + be(4000000000u) + be(4096) + be(4096);
  const std::string lab = be(2049) + be(4000000000u);
  auto msg = arcal::testing::input_error_message([&] { parse_idx_pair(img, lab, "i.gz", "l.gz", 10); });
  EXPECT_NE(msg.find("i.gz: 4000000000 images of 4096x4096 pixels exceed the limit"), std::string::npos) << msg;
  msg = arcal::testing::input_error_message(
      [&] { parse_idx_pair(be(2051) + be(1) + be(0) + be(9), be(2049) + be(1) + "\1", "i", "l", 10); });
  EXPECT_NE(msg.find("image size 0x9 is outside [1, 4096]"), std::string::npos) << msg;
}

TEST(InputLimits, CifarDataBeyondTheLimit) {
  SmallLimits small(3073 * 2);
  ImageSet s;
  append_cifar_bytes(s, std::string(3073 * 2, '\1'), "a.bin", false);
  EXPECT_EQ(s.n, 2u);
  const auto msg =
      arcal::testing::input_error_message([&] { append_cifar_bytes(s, std::string(3073, '\1'), "b.bin", false); });
  EXPECT_NE(msg.find("b.bin: the CIFAR files together exceed the limit"), std::string::npos) << msg;
}
