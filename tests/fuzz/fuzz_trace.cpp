// libFuzzer target: the trace validator (trace_from_arrays: shapes, dtypes, labels, finiteness,
// routing normalisation) on arrays given as a simple container of .npy images, so that mutations
// reach the arrays directly (inside a zip, most would only break its CRC; fuzz_npz covers the zip):
//   repeated { u8 name length, name, u32 little-endian length, .npy bytes }.
#include "fuzz_common.hpp"
#include "io/npz.hpp"
#include "io/trace.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return arcal::fuzz::expect_input_error_only([&] {
    std::vector<arcal::NpyArray> arrays;
    std::size_t pos = 0;
    while (pos < size && arrays.size() < 16) {
      const std::size_t name_len = data[pos++];
      if (pos + name_len + 4 > size) break;
      const std::string name(reinterpret_cast<const char*>(data + pos), name_len);
      pos += name_len;
      std::size_t len = 0;
      for (int k = 0; k < 4; ++k) len |= std::size_t(data[pos + std::size_t(k)]) << (8 * k);
      pos += 4;
      len = std::min(len, size - pos);
      arrays.push_back(arcal::parse_npy(std::string(reinterpret_cast<const char*>(data + pos), len), "fuzz", name));
      pos += len;
    }
    const arcal::Trace t = arcal::trace_from_arrays(std::move(arrays), "fuzz.npz");
    const auto p = arcal::trace_probabilities(t);
    ARCAL_ASSERT(p.size() == t.n * t.classes, "probabilities of a valid trace");
    arcal::validate_trace(t);  // what loaded must validate again
  });
}
