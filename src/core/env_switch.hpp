// A process-wide on/off switch for benchmarks and profiles, read once from an environment variable
// (on unless it is "0") and settable from code, which overrides the environment. The fused operators
// (ARCAL_FUSED) and AR-ViT's first-token cut (ARCAL_FIRST_TOKEN_CUT) are such switches.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace arcal {

class EnvSwitch {
 public:
  explicit constexpr EnvSwitch(const char* variable) : variable_(variable) {}
  bool enabled() {
    int v = state_.load(std::memory_order_relaxed);
    if (v < 0) {
      const char* env = std::getenv(variable_);
      v = (env && std::strcmp(env, "0") == 0) ? 0 : 1;
      state_.store(v, std::memory_order_relaxed);
    }
    return v == 1;
  }
  void set(bool enabled) { state_.store(enabled ? 1 : 0, std::memory_order_relaxed); }

 private:
  const char* variable_;
  std::atomic<int> state_{-1};  // -1: not read from the environment yet
};

}  // namespace arcal
