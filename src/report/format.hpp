// How the report writes numbers: fixed digits, signed gains, p-values, intervals; "n/a" or "-" for
// values that are not defined (NaN). Shared by every section (report/sections*.cpp).
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "stats/bootstrap.hpp"

namespace arcal::report {

inline std::string f4(double v) { return std::isfinite(v) ? fmt::format("{:.4f}", v) : std::string("n/a"); }
inline std::string pct(double v) { return std::isfinite(v) ? fmt::format("{:.2f} %", 100.0 * v) : std::string("n/a"); }
inline std::string sgn(double v) { return std::isfinite(v) ? fmt::format("{:+.5f}", v) : std::string("n/a"); }
inline std::string pval(double p) {
  if (!std::isfinite(p)) return "n/a";
  return p < 1e-3 ? fmt::format("{:.1e}", p) : fmt::format("{:.3f}", p);
}
inline std::string ci(const Interval& i, int digits = 4) {
  if (!std::isfinite(i.low) || !std::isfinite(i.high)) return "-";
  return fmt::format("[{:.{}f}, {:.{}f}]", i.low, digits, i.high, digits);
}
/// A probe delta (probe - control) shown as a gain (control - probe): the interval flipped.
inline Interval gain_ci(const Interval& delta_ci) { return {-delta_ci.high, -delta_ci.low}; }

}  // namespace arcal::report
