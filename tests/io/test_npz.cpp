// .npz reader/writer against numpy as the independent client: numpy reads what arcal writes and
// arcal reads what np.savez / np.savez_compressed write (every supported dtype, and big-endian,
// Fortran-order, float16 and small or unsigned integer arrays converted), and a table of corrupt,
// truncated and unsupported inputs must throw InputError naming the file and the array.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <cmath>
#include <unistd.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/ownership.hpp"
#include "io/npz.hpp"
#include "test_util.hpp"

using namespace arcal;
namespace fs = std::filesystem;

namespace {

std::string tmp_dir(const std::string& name) { return arcal::testing::fresh_dir(name); }

int run_python(const std::string& args, std::string* out = nullptr) {
  const std::string cmd =
      std::string(ARCAL_TEST_PYTHON) + " " + ARCAL_SOURCE_DIR + "/tests/reference/" + args + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) text += buf;
  const int rc = ::pclose(pipe);
  if (out) *out = text;
  return rc;
}

std::map<std::string, NpyArray> by_name(const std::vector<NpyArray>& v) {
  std::map<std::string, NpyArray> m;
  for (const auto& a : v) m.emplace(a.name, a);
  return m;
}

// The arrays of tests/reference/npz_reference.py expected().
std::vector<NpyArray> expected_arrays() {
  std::vector<double> f8(12);
  for (int i = 0; i < 12; ++i) f8[static_cast<std::size_t>(i)] = i * 0.5 - 1.25;
  std::vector<float> f4 = {-1.0f, -0.6f, -0.2f, 0.2f, 0.6f, 1.0f};
  std::vector<float> cube(24);
  for (int i = 0; i < 24; ++i) cube[static_cast<std::size_t>(i)] = static_cast<float>(i);
  return {NpyArray::from_double("f8", f8, {3, 4}),
          NpyArray::from_float("f4", f4, {2, 3}),
          NpyArray::from_int32("i4", {-3, -2, -1, 0, 1, 2}, {6}),
          NpyArray::from_int64("i8", {1099511627776LL, -7, 0}, {3}),
          NpyArray::from_bool("b1", {true, false, true}, {3}),
          NpyArray::from_strings("u1",
                                 {"alpha",
                                  "\xce\xb2"
                                  "eta",
                                  ""},
                                 {3}),
          NpyArray::scalar_string("meta", "{\"model\": \"ar-vit-tiny\", \"seed\": 3}"),
          NpyArray::from_double("empty", {}, {0, 3}),
          NpyArray::from_float("cube", cube, {2, 3, 4})};
}

void expect_matches_reference(const std::vector<NpyArray>& got_list) {
  auto got = by_name(got_list);
  ASSERT_EQ(got.size(), 9u);
  const auto& f8 = got.at("f8");
  EXPECT_EQ(f8.dtype, DType::f8);
  EXPECT_EQ(f8.shape, (std::vector<std::size_t>{3, 4}));
  const auto f8v = f8.as_double();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(f8v[static_cast<std::size_t>(i)], i * 0.5 - 1.25);
  const auto& f4 = got.at("f4");
  EXPECT_EQ(f4.dtype, DType::f4);
  EXPECT_EQ(f4.shape, (std::vector<std::size_t>{2, 3}));
  // np.linspace(-1, 1, 6, dtype=float32): computed in float64, then rounded to float32.
  const auto f4v = f4.as_float();
  const float want4[] = {-1.0f, -0.6f, -0.2f, 0.2f, 0.6f, 1.0f};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(f4v[static_cast<std::size_t>(i)], want4[i]);
  EXPECT_EQ(got.at("i4").dtype, DType::i4);
  EXPECT_EQ(got.at("i4").as_int64(), (std::vector<std::int64_t>{-3, -2, -1, 0, 1, 2}));
  EXPECT_EQ(got.at("i8").dtype, DType::i8);
  EXPECT_EQ(got.at("i8").as_int64(), (std::vector<std::int64_t>{1099511627776LL, -7, 0}));
  EXPECT_EQ(got.at("b1").dtype, DType::b1);
  EXPECT_EQ(got.at("b1").as_double(), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(got.at("u1").dtype, DType::unicode);
  EXPECT_EQ(got.at("u1").itemsize, 20u);  // <U5
  EXPECT_EQ(got.at("u1").as_strings(), (std::vector<std::string>{"alpha",
                                                                 "\xce\xb2"
                                                                 "eta",
                                                                 ""}));
  EXPECT_EQ(got.at("meta").ndim(), 0u);
  EXPECT_EQ(got.at("meta").as_strings().at(0), "{\"model\": \"ar-vit-tiny\", \"seed\": 3}");
  EXPECT_EQ(got.at("empty").shape, (std::vector<std::size_t>{0, 3}));
  EXPECT_TRUE(got.at("empty").as_double().empty());
  EXPECT_EQ(got.at("cube").shape, (std::vector<std::size_t>{2, 3, 4}));
  EXPECT_EQ(got.at("cube").as_float().at(23), 23.0f);
}

void expect_throw_naming(const std::string& path, const std::string& needle1, const std::string& needle2) {
  try {
    read_npz(path);
    ADD_FAILURE() << "no exception for " << path;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(needle1), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle2), std::string::npos) << msg;
  }
}

}  // namespace

TEST(Npz, ReadsNumpySavezAndSavezCompressed) {
  const std::string d = tmp_dir("npz_read");
  std::string out;
  ASSERT_EQ(run_python("npz_reference.py write " + d, &out), 0) << out;
  expect_matches_reference(read_npz(d + "/savez.npz"));
  expect_matches_reference(read_npz(d + "/savez_compressed.npz"));
}

TEST(Npz, NumpyLoadsWhatArcalWrites) {
  const std::string d = tmp_dir("npz_write");
  for (bool compress : {false, true}) {
    const std::string path = d + (compress ? "/c.npz" : "/s.npz");
    write_npz(path, expected_arrays(), compress);
    std::string out;
    EXPECT_EQ(run_python("npz_reference.py check " + path, &out), 0) << out;
    EXPECT_NE(out.find("OK"), std::string::npos) << out;
    expect_matches_reference(read_npz(path));  // and our own reader agrees
    EXPECT_FALSE(fs::exists(path + ".tmp." + arcal::process_tag()));
  }
}

TEST(Npz, NpyHeaderIsV1AndAligned) {
  const std::string img = format_npy(NpyArray::from_double("x", {1, 2, 3}, {3}));
  EXPECT_EQ(img.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t hlen = static_cast<unsigned char>(img[8]) | (static_cast<unsigned char>(img[9]) << 8);
  EXPECT_EQ((10 + hlen) % 64, 0u);
  EXPECT_NE(img.find("'shape': (3,)"), std::string::npos);
  EXPECT_EQ(img[10 + hlen - 1], '\n');
}

TEST(Npz, RefusesUnsupportedArraysNamingThem) {
  const std::string d = tmp_dir("npz_bad");
  std::string out;
  ASSERT_EQ(run_python("npz_reference.py write " + d, &out), 0) << out;
  expect_throw_naming(d + "/bad_object.npz", "'obj'", "object");
  expect_throw_naming(d + "/bad_uint64.npz", "'huge'", "uint64 element 1 is 9223372036854775808");
  expect_throw_naming(d + "/bad_complex.npz", "'cplx'", "unsupported dtype");
}

// What numpy also writes for numbers is converted on read to the held dtypes, values exact.
TEST(Npz, ConvertsBigEndianFortranFloat16AndSmallIntegers) {
  const std::string d = tmp_dir("npz_convert");
  std::string out;
  ASSERT_EQ(run_python("npz_reference.py write " + d, &out), 0) << out;
  auto m = by_name(read_npz(d + "/converted.npz"));
  auto expect = [&](const std::string& name, DType dtype, std::vector<std::size_t> shape) -> const NpyArray& {
    const NpyArray& a = m.at(name);
    EXPECT_EQ(a.dtype, dtype) << name;
    EXPECT_EQ(a.shape, shape) << name;
    return a;
  };
  EXPECT_EQ(expect("fort", DType::f8, {2, 3}).as_double(), (std::vector<double>{0, 1, 2, 3, 4, 5}));
  std::vector<double> cube(24);
  for (int i = 0; i < 24; ++i) cube[std::size_t(i)] = i;
  EXPECT_EQ(expect("fort3", DType::f4, {2, 3, 4}).as_double(), cube);  // big-endian and Fortran at once
  EXPECT_EQ(expect("big", DType::f8, {3}).as_double(), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(expect("big_i4", DType::i4, {2}).as_int64(), (std::vector<std::int64_t>{-5, 7}));
  EXPECT_EQ(expect("big_u", DType::unicode, {2}).as_strings(), (std::vector<std::string>{"ab", "\xce\xb2"}));
  const std::vector<double> half = {0.0,      -2.5,     65504.0, std::ldexp(1.0, -14), std::ldexp(1.0, -24),
                                    INFINITY, -INFINITY};
  EXPECT_EQ(expect("half", DType::f4, {7}).as_double(), half);  // exact, the subnormal 2^-24 included
  EXPECT_EQ(expect("half_big", DType::f4, {7}).as_double(), half);
  EXPECT_EQ(expect("i1", DType::i4, {2}).as_int64(), (std::vector<std::int64_t>{-128, 127}));
  EXPECT_EQ(expect("u1", DType::i4, {2}).as_int64(), (std::vector<std::int64_t>{0, 255}));
  EXPECT_EQ(expect("i2", DType::i4, {2}).as_int64(), (std::vector<std::int64_t>{-32768, 5}));
  EXPECT_EQ(expect("u2", DType::i4, {1}).as_int64(), (std::vector<std::int64_t>{65535}));
  EXPECT_EQ(expect("u4", DType::i8, {1}).as_int64(), (std::vector<std::int64_t>{4294967295LL}));
  EXPECT_EQ(expect("u8", DType::i8, {1}).as_int64(), (std::vector<std::int64_t>{INT64_MAX}));
  EXPECT_EQ(expect("b1_big", DType::b1, {2}).as_int64(), (std::vector<std::int64_t>{1, 0}));
}

TEST(Npz, RefusesCorruptAndTruncatedFiles) {
  const std::string d = tmp_dir("npz_corrupt");
  const std::string good = d + "/good.npz";
  std::vector<double> big(5000);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = std::sin(static_cast<double>(i));
  write_npz(good, {NpyArray::from_double("logits", big, {1000, 5})}, true);
  const std::string bytes = read_file(good);
  struct Case {
    std::string name, content, needle;
  };
  std::string flipped = bytes;
  flipped[200] = static_cast<char>(flipped[200] ^ 0x5A);  // inside the deflate stream of 'logits'
  const std::vector<Case> cases = {
      {"truncated_half", bytes.substr(0, bytes.size() / 2), "zip"},
      {"truncated_tail", bytes.substr(0, bytes.size() - 10), "zip"},
      {"empty", "", "zip"},
      {"not_zip", "hello, this is not a zip archive at all", "zip"},
      {"bitflip", flipped, "'logits'"},
  };
  for (const auto& c : cases) {
    const std::string p = d + "/" + c.name + ".npz";
    write_file_atomic(p, c.content);
    SCOPED_TRACE(c.name);
    expect_throw_naming(p, p, c.needle);
  }
  expect_throw_naming(d + "/missing.npz", "missing.npz", "cannot open");
}

TEST(Npz, RefusesDataShorterOrLongerThanHeader) {
  std::string img = format_npy(NpyArray::from_double("x", {1, 2, 3, 4}, {4}));
  try {
    parse_npy(img.substr(0, img.size() - 8), "f.npz", "x");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("24 bytes, but the header's shape needs 32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_npy(img + "extra", "f.npz", "x"), InputError);
  EXPECT_THROW(parse_npy("\x93NUMPX\x01\x00", "f.npz", "x"), InputError);
  std::string v9 = img;
  v9[6] = 9;
  EXPECT_THROW(parse_npy(v9, "f.npz", "x"), InputError);
}

TEST(Npz, TypedAccessorsRefuseWrongKinds) {
  const auto f = NpyArray::from_double("probs", {0.5}, {1});
  EXPECT_THROW(f.as_int64("ctx"), InputError);
  EXPECT_THROW(f.as_strings("ctx"), InputError);
  const auto s = NpyArray::scalar_string("meta", "x");
  EXPECT_THROW(s.as_double("ctx"), InputError);
  EXPECT_THROW(NpyArray::from_double("x", {1, 2, 3}, {2, 2}), InputError);
  EXPECT_THROW(write_npz("/nonexistent-dir/x.npz", {f}, false), InputError);
  EXPECT_THROW(write_npz("/tmp/dup.npz", {f, f}, false), InputError);
}
