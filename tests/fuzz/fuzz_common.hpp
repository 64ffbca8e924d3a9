// Shared by the libFuzzer targets in tests/fuzz: small limits (so a crafted size is refused long
// before libFuzzer's memory limit, deterministically) and the rule that an InputError is the
// expected answer to bad input, while anything else escaping (another exception, an ARCAL_ASSERT,
// a sanitizer report) is a finding. The same entry points run under the regular compiler in the
// replay test (replay_main.cpp), which feeds every file of tests/fuzz/corpus/TARGET through them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/limits.hpp"

namespace arcal::fuzz {

inline void set_fuzz_limits() {
  InputLimits l;
  l.max_array_bytes = std::uint64_t(64) << 20;
  l.max_total_bytes = std::uint64_t(128) << 20;
  l.max_text_bytes = std::uint64_t(4) << 20;
  l.check_available_memory = false;
  set_input_limits(l);
}

/// Runs f(); an InputError is the correct answer to bad input and is swallowed.
template <class F>
int expect_input_error_only(F&& f) {
  try {
    f();
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace arcal::fuzz

#define ARCAL_FUZZ_INIT                                \
  extern "C" int LLVMFuzzerInitialize(int*, char***) { \
    arcal::fuzz::set_fuzz_limits();                    \
    return 0;                                          \
  }
