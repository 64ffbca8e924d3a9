// Field helpers shared by every to_json/from_json of src/results: numbers that may be null (NaN and
// infinities are written as null and read back as NaN), intervals as [low, high] or null, and reads
// that name the missing key. The functions are inline and use `nlohmann::json`, so a translation unit
// compiled with JSON_DIAGNOSTICS (src/results/read.cpp) gets its own overloads under nlohmann's ABI tag
// and its errors carry the JSON pointer of the offending value.
#pragma once

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stats/bootstrap.hpp"

namespace arcal::results {

/// A number, or null when it is not finite (JSON has no NaN).
inline nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

/// [low, high], or null when either end is not finite.
inline nlohmann::json interval_json(const Interval& ci) {
  if (!std::isfinite(ci.low) || !std::isfinite(ci.high)) return nullptr;
  return nlohmann::json::array({ci.low, ci.high});
}

/// j[key] as T; throws nlohmann's out_of_range (403, naming the key and the object's pointer) when absent.
template <class T>
void get_to(const nlohmann::json& j, const char* key, T& out) {
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
  if (!v.is_array()) throw nlohmann::json::type_error::create(302, std::string("type must be array, but is ") + v.type_name(), &v);
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
  if (!v.is_array()) throw nlohmann::json::type_error::create(302, std::string("type must be array, but is ") + v.type_name(), &v);
  return v;
}

/// j[key], which must be an object (keyed rows: probes by name, arms by name).
inline const nlohmann::json& object_at(const nlohmann::json& j, const char* key) {
  const auto& v = j.at(key);
  if (!v.is_object()) throw nlohmann::json::type_error::create(302, std::string("type must be object, but is ") + v.type_name(), &v);
  return v;
}

/// j[key] when present, otherwise `fallback` (for keys a later schema version added).
template <class T>
T value_or(const nlohmann::json& j, const char* key, T fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->template get<T>();
}

}  // namespace arcal::results
