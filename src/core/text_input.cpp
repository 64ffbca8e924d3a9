#include "core/text_input.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.hpp"
#include "core/limits.hpp"

namespace arcal {

std::string read_text_file(const std::string& path, const std::string& fn, const std::string& what,
                           std::uint64_t max_bytes) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0)
    throw InputError(fn + ": cannot read " + what + " '" + path + "': " + std::strerror(errno));
  if (S_ISDIR(sb.st_mode)) throw InputError(fn + ": " + what + " '" + path + "' is a directory");
  if (S_ISREG(sb.st_mode) && static_cast<std::uint64_t>(sb.st_size) > max_bytes)
    throw InputError(fn + ": " + path + ": " + what + " is " + byte_size(std::uint64_t(sb.st_size)) +
                     ", more than the limit of " + byte_size(max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fn + ": cannot read " + what + " '" + path + "': " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    out.append(buf, static_cast<std::size_t>(in.gcount()));
    if (out.size() > max_bytes)  // not a regular file (a pipe): the cap applies while reading
      throw InputError(fn + ": " + path + ": " + what + " is more than the limit of " + byte_size(max_bytes));
  }
  return out;
}

void check_json_nesting(const std::string& text, const std::string& fn, const std::string& label) {
  const int limit = input_limits().max_nesting;
  int depth = 0;
  std::size_t line = 1;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '"') {
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\')
          ++i;
        else if (text[i] == '\n')
          ++line;
      }
    } else if (c == '[' || c == '{') {
      if (++depth > limit)
        throw InputError(fn + ": " + label + ": line " + std::to_string(line) +
                         ": arrays and objects nested more than " + std::to_string(limit) + " deep (the limit)");
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    }
  }
}

nlohmann::json parse_json_text(const std::string& text, const std::string& fn, const std::string& label) {
  check_json_nesting(text, fn, label);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fn + ": " + label + " is not valid JSON (" + e.what() + ")");
  }
}

std::string json_brief(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

namespace {
const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where, const char* want) {
  if (!j.is_object()) throw InputError(where + " must be a JSON object, but is " + json_brief(j));
  auto it = j.find(key);
  if (it == j.end()) throw InputError(where + ": key '" + key + "' is missing (must be " + want + ")");
  return *it;
}
[[noreturn]] void wrong(const nlohmann::json& v, const char* key, const std::string& where, const std::string& want) {
  throw InputError(where + ": key '" + key + "' must be " + want + ", but is " + json_brief(v));
}
}  // namespace

std::string json_string(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where, "a string");
  if (!v.is_string()) wrong(v, key, where, "a string");
  return v.get<std::string>();
}

long long json_int(const nlohmann::json& j, const char* key, const std::string& where, const IntRange& range) {
  const std::string want = "an integer in " + range_text(range);
  const auto& v = field(j, key, where, want.c_str());
  long long x = 0;
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(range.hi)) wrong(v, key, where, want);
    x = static_cast<long long>(u);
  } else if (v.is_number_integer()) {
    x = v.get<long long>();
  } else {
    wrong(v, key, where, want);
  }
  if (!in_range(range, x)) wrong(v, key, where, want);
  return x;
}

std::uint64_t json_uint64(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where, "an integer >= 0");
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<long long>() >= 0) return static_cast<std::uint64_t>(v.get<long long>());
  wrong(v, key, where, "an integer >= 0");
}

double json_real(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where, "a number");
  if (!v.is_number()) wrong(v, key, where, "a number");
  const double x = v.get<double>();
  if (!std::isfinite(x)) wrong(v, key, where, "a finite number");
  return x;
}

bool json_bool(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where, "true or false");
  if (!v.is_boolean()) wrong(v, key, where, "true or false");
  return v.get<bool>();
}

nlohmann::json read_json_file(const std::string& path, const std::string& fn, const std::string& what) {
  return parse_json_text(read_text_file(path, fn, what, input_limits().max_text_bytes), fn, path);
}

}  // namespace arcal
