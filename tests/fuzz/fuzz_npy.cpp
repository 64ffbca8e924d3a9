// libFuzzer target: one .npy image through parse_npy and every conversion of the array.
#include "fuzz_common.hpp"
#include "io/npz.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  return arcal::fuzz::expect_input_error_only([&] {
    const arcal::NpyArray a = arcal::parse_npy(bytes, "fuzz.npy", "x");
    if (a.dtype == arcal::DType::unicode) {
      a.as_strings("fuzz");
    } else {
      a.as_double("fuzz");
      a.as_float("fuzz");
      if (a.dtype != arcal::DType::f4 && a.dtype != arcal::DType::f8) a.as_int64("fuzz");
    }
    // What arcal writes must read back to the same array.
    const arcal::NpyArray b = arcal::parse_npy(arcal::format_npy(a), "fuzz.npy", "x");
    ARCAL_ASSERT(b.shape == a.shape && b.data == a.data && b.dtype == a.dtype, "npy round trip");
  });
}
