// Field helpers shared by every to_json/from_json of src/results: numbers that may be null (NaN and
// infinities are written as null and read back as NaN), intervals as [low, high] or null, and reads
// that name the missing key. The functions are inline and use `nlohmann::json`, so a translation unit
// compiled with JSON_DIAGNOSTICS (src/results/read.cpp) gets its own overloads under nlohmann's ABI tag
// and its errors carry the JSON pointer of the offending value.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "stats/bootstrap.hpp"

namespace arcal::results {

/// A number, or null when it is not finite (JSON has no NaN).
inline nlohmann::json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

/// [low, high], or null when either end is not finite.
inline nlohmann::json interval_json(const Interval& ci) {
  if (!std::isfinite(ci.low) || !std::isfinite(ci.high)) return nullptr;
  return nlohmann::json::array({ci.low, ci.high});
}

/// v as the integer type T. nlohmann converts a float or an out-of-range integer with a plain cast,
/// which is undefined behaviour for 7.8e29 -> int (found by fuzz_results_json); here a value that is
/// not an integer within T's range throws nlohmann's type_error (302) naming its JSON pointer.
template <class T>
T integer_value(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  using L = std::numeric_limits<T>;
  const auto bad = [&]() {
    return nlohmann::json::type_error::create(302,
                                              "must be an integer in [" + std::to_string(L::min()) + ", " +
                                                  std::to_string(L::max()) + "], but is " + v.dump(),
                                              &v);
  };
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(L::max())) throw bad();
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {
    const std::int64_t s = v.get<std::int64_t>();
    if ((std::is_unsigned_v<T> && s < 0) || (std::is_signed_v<T> && (s < static_cast<std::int64_t>(L::min()))) ||
        (s > 0 && static_cast<std::uint64_t>(s) > static_cast<std::uint64_t>(L::max())))
      throw bad();
    return static_cast<T>(s);
  }
  if (v.is_number_float()) {
    // 2^63 and 2^64 are exact doubles: d < 2^(digits) is the range test without a rounding cast.
    const double d = v.get<double>(), top = std::ldexp(1.0, L::digits);
    if (!(d == std::floor(d)) || d >= top || d < static_cast<double>(L::min())) throw bad();
    return static_cast<T>(d);
  }
  return v.get<T>();  // not a number: nlohmann's own type_error
}

/// j[key] as T; throws nlohmann's out_of_range (403, naming the key and the object's pointer) when absent.
/// Integers are range-checked (integer_value).
template <class T>
void get_to(const nlohmann::json& j, const char* key, T& out) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    out = integer_value<T>(j.at(key));
  else
    j.at(key).get_to(out);
}

/// j[key] as a double; null reads as NaN (absent is an error).
inline void get_number(const nlohmann::json& j, const char* key, double& out) {
  const auto& v = j.at(key);
  out = v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

/// j[key] as a vector of doubles; null entries read as NaN.
inline void get_numbers(const nlohmann::json& j, const char* key, std::vector<double>& out) {
  const auto& v = j.at(key);
  if (!v.is_array())
    throw nlohmann::json::type_error::create(302, std::string("type must be array, but is ") + v.type_name(), &v);
  out.clear();
  out.reserve(v.size());
  for (const auto& x : v) out.push_back(x.is_null() ? std::numeric_limits<double>::quiet_NaN() : x.get<double>());
}

/// j[key] as an interval: [low, high] (entries may be null) or null (both ends NaN).
inline void get_interval(const nlohmann::json& j, const char* key, Interval& out) {
  const auto& v = j.at(key);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (v.is_null()) {
    out = {nan, nan};
    return;
  }
  if (!v.is_array() || v.size() != 2)
    throw nlohmann::json::type_error::create(302, "an interval must be [low, high] or null", &v);
  out.low = v[0].is_null() ? nan : v[0].get<double>();
  out.high = v[1].is_null() ? nan : v[1].get<double>();
}

/// j[key], which must be an array (a loop over an object would read its values as rows).
inline const nlohmann::json& array_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_array())
    throw nlohmann::json::type_error::create(302, std::string("type must be array, but is ") + v.type_name(), &v);
  return v;
}

/// j[key], which must be an object (keyed rows: probes by name, arms by name).
inline const nlohmann::json& object_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_object())
    throw nlohmann::json::type_error::create(302, std::string("type must be object, but is ") + v.type_name(), &v);
  return v;
}

/// j[key] when present, otherwise `fallback` (for keys a later schema version added).
template <class T>
T value_or(const nlohmann::json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return integer_value<T>(*it);
  else
    return it->template get<T>();
}

}  // namespace arcal::results
