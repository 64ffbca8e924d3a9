// CSV output helpers shared by the audit's tables and the report's tables (RFC 4180 quoting).
#pragma once

#include <string>

namespace arcal {

/// The field as written in a CSV row: quoted (inner quotes doubled) when it holds a comma, a quote or
/// a newline, as is otherwise.
inline std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace arcal
