// libFuzzer target: the CIFAR binary reader. The first byte chooses CIFAR-10 (even) or CIFAR-100
// (odd); the rest is the file.
#include "fuzz_common.hpp"
#include "io/image_data.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool c100 = data[0] & 1;
  const std::string file(reinterpret_cast<const char*>(data + 1), size - 1);
  return arcal::fuzz::expect_input_error_only([&] {
    arcal::ImageSet s;
    arcal::append_cifar_bytes(s, file, "fuzz.bin", c100);
    ARCAL_ASSERT(s.pixels.size() == s.n * 3072 && s.labels.size() == s.n, "CIFAR record count");
  });
}
