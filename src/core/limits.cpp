#include "core/limits.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <mutex>
#include <sstream>

#include "core/error.hpp"

namespace arcal {

namespace {

std::uint64_t env_bytes(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0' || x == 0) {
    std::fprintf(stderr, "arcal: ignoring %s=%s (expected a positive number of bytes)\n", name, v);
    return fallback;
  }
  return x;
}

InputLimits& limits_storage() {
  static InputLimits limits = [] {
    InputLimits l;
    l.max_array_bytes = env_bytes("ARCAL_MAX_ARRAY_BYTES", l.max_array_bytes);
    if (l.max_total_bytes < l.max_array_bytes) l.max_total_bytes = l.max_array_bytes;
    l.max_text_bytes = env_bytes("ARCAL_MAX_TEXT_BYTES", l.max_text_bytes);
    return l;
  }();
  return limits;
}

}  // namespace

const InputLimits& input_limits() { return limits_storage(); }
void set_input_limits(const InputLimits& limits) { limits_storage() = limits; }

std::uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return false;
  out = r;
  return true;
}

bool checked_add(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  std::uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return false;
  out = r;
  return true;
}

std::string byte_size(std::uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return std::to_string(bytes) + " bytes";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return std::string(buf) + " (" + std::to_string(bytes) + " bytes)";
}

void check_array_bytes(std::uint64_t bytes, const std::string& context, const std::string& what) {
  const InputLimits& l = input_limits();
  if (bytes > l.max_array_bytes)
    throw InputError(context + ": " + what + " needs " + byte_size(bytes) + ", more than the limit of " +
                     byte_size(l.max_array_bytes) + " for one array (set ARCAL_MAX_ARRAY_BYTES to raise it)");
  if (l.check_available_memory) {
    const std::uint64_t avail = available_memory_bytes();
    if (avail > 0 && bytes > avail)
      throw InputError(context + ": " + what + " needs " + byte_size(bytes) + ", more than the " + byte_size(avail) +
                       " of memory available now");
  }
}

namespace {
std::string num_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
}  // namespace

std::string range_text(const IntRange& r) { return "[" + std::to_string(r.lo) + ", " + std::to_string(r.hi) + "]"; }
std::string range_text(const RealRange& r) {
  return std::string(r.lo_open ? "(" : "[") + num_text(r.lo) + ", " + num_text(r.hi) + "]";
}
bool in_range(const IntRange& r, long long v) { return v >= r.lo && v <= r.hi; }
bool in_range(const RealRange& r, double v) {
  if (!std::isfinite(v)) return false;
  return (r.lo_open ? v > r.lo : v >= r.lo) && v <= r.hi;
}

}  // namespace arcal
