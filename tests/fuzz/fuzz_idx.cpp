// libFuzzer target: the IDX reader (gzip'd or plain images + labels). Input: u32 little-endian
// length L of the image file, the image file (L bytes), then the label file.
#include "fuzz_common.hpp"
#include "io/image_data.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  std::size_t len = 0;
  for (int k = 0; k < 4; ++k) len |= std::size_t(data[k]) << (8 * k);
  len = std::min(len, size - 4);
  const std::string images(reinterpret_cast<const char*>(data + 4), len);
  const std::string labels(reinterpret_cast<const char*>(data + 4 + len), size - 4 - len);
  return arcal::fuzz::expect_input_error_only([&] {
    const arcal::ImageSet s = arcal::parse_idx_pair(images, labels, "images.gz", "labels.gz", 10);
    ARCAL_ASSERT(s.pixels.size() == s.n * std::size_t(s.height) * std::size_t(s.width), "IDX pixel count");
    ARCAL_ASSERT(s.labels.size() == s.n, "IDX label count");
  });
}
