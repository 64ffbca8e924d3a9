// libFuzzer target: a whole .npz archive from memory through read_npz_bytes (libzip, the size and
// inflate limits) and every conversion of each member.
#include "fuzz_common.hpp"
#include "io/npz.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  return arcal::fuzz::expect_input_error_only([&] {
    for (const auto& a : arcal::read_npz_bytes(bytes, "fuzz.npz")) {
      if (a.dtype == arcal::DType::unicode) {
        a.as_strings("fuzz");
      } else {
        a.as_double("fuzz");
        if (a.dtype != arcal::DType::f4 && a.dtype != arcal::DType::f8) a.as_int64("fuzz");
      }
    }
  });
}
