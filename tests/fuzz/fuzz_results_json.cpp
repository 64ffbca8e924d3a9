// libFuzzer target: the results.json reader of `arcal report`: limits, JSON syntax, the schema and
// every value the report reads (the whole document is built without writing a file).
#include "fuzz_common.hpp"
#include "report/report.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return arcal::fuzz::expect_input_error_only([&] { arcal::check_report_text(text, "results.json"); });
}
