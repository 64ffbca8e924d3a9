// CLI11 validators for the numeric flags, built from the ranges of core/limits.hpp so that the option
// tables, --help and the study file check the same bounds. A value out of range is a usage error
// (exit 2) naming the flag, the value and the range, before any file is read.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/limits.hpp"

namespace arcal::cli {

/// Integers in [lo, hi].
inline CLI::Validator in_range(const IntRange& r) {
  return CLI::Validator(
      [r](std::string& in) -> std::string {
        long long v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return "'" + in + "' is not an integer";
        if (!arcal::in_range(r, v)) return in + " is outside " + range_text(r);
        return {};
      },
      "INT in " + range_text(r));
}

/// Finite numbers in [lo, hi] or (lo, hi]; NaN and infinities are refused.
inline CLI::Validator in_range(const RealRange& r) {
  return CLI::Validator(
      [r](std::string& in) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(in, v)) return "'" + in + "' is not a number";
        if (!arcal::in_range(r, v)) return in + " is outside " + range_text(r);
        return {};
      },
      "NUMBER in " + range_text(r));
}

/// Seeds: decimal digits only (CLI11 would otherwise read "-1" as 2^64 - 1).
inline CLI::Validator seed_check() {
  return CLI::Validator(
      [](std::string& in) -> std::string {
        if (in.empty() || in.size() > 20 || in.find_first_not_of("0123456789") != std::string::npos)
          return "'" + in + "' is not a seed (an integer in [0, 2^64 - 1])";
        return {};
      },
      "SEED >= 0");
}

}  // namespace arcal::cli
