// libFuzzer target: a trace's `meta` text, the one JSON value inside a trace file. The input is the
// meta string of an otherwise valid trace; trace_from_arrays must refuse what the capped JSON reader
// refuses (size, nesting: a 100,000-deep meta once overflowed the stack of the recursive parser in
// the audit), and what it accepts must be readable by the audit's run naming (trace_cell).
#include "audit/run_input.hpp"
#include "fuzz_common.hpp"
#include "io/npz.hpp"
#include "io/trace.hpp"

ARCAL_FUZZ_INIT

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string meta(reinterpret_cast<const char*>(data), size);
  return arcal::fuzz::expect_input_error_only([&] {
    std::vector<arcal::NpyArray> arrays;
    arrays.push_back(arcal::NpyArray::from_double("logits", {2.0, -1.0, 0.5, 0.1, -0.3, 1.2}, {3, 2}));
    arrays.push_back(arcal::NpyArray::from_int64("labels", {0, 1, 1}, {3}));
    arrays.push_back(arcal::NpyArray::scalar_string("meta", meta));
    const arcal::Trace t = arcal::trace_from_arrays(arrays, "fuzz.npz");
    const std::string cell = arcal::trace_cell(t, "run");
    ARCAL_ASSERT(!cell.empty(), "a run is always named");
    arcal::validate_trace(t);
  });
}
