// Shared helpers for the audit and probe tests: the 99 % binomial acceptance band used by the type-I
// checks, the switch for the long (full-size) tests, and a simulated run's audit input.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string>
#include <utility>

#include "audit/run_input.hpp"
#include "audit/simulate.hpp"
#include "stats/paired_tests.hpp"

namespace arcal::test_util {

/// The 99 % binomial band of stats/paired_tests.hpp, under the name the tests use.
using arcal::binomial_band_99;

/// True when ARCAL_LONG_TESTS=1 (ctest -L long sets it).
inline bool long_tests() {
  const char* v = std::getenv("ARCAL_LONG_TESTS");
  return v && std::string(v) == "1";
}

/// Audit input of a simulated trace (statistic "re") with an injected effect in nats.
inline AuditRunInput simulated_run(std::size_t n, double effect, std::uint64_t seed) {
  SimulationOptions so;
  so.n = n;
  so.effect_nats = effect;
  so.seed = seed;
  return make_audit_run_input(simulate_trace(so).trace, "sim" + std::to_string(seed), {"re"});
}

}  // namespace arcal::test_util
