// Reading text files that arcal parses as a whole (study TOML, config.json, results.json, calibrator
// parameters) with explicit limits: the size is checked before reading, and JSON nesting is counted
// on the raw text before nlohmann::json builds (and later recursively destroys or prints) the tree.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/limits.hpp"

namespace arcal {

/// The whole file, refused (InputError "FN: PATH: WHAT is SIZE, more than the limit of LIMIT") when
/// larger than `max_bytes`, or when it is missing, a directory or unreadable.
std::string read_text_file(const std::string& path, const std::string& fn, const std::string& what,
                           std::uint64_t max_bytes);

/// Throws InputError naming `label` and the line when arrays/objects nest deeper than the limit
/// (core/limits.hpp max_nesting). Strings are skipped as JSON delimits them.
void check_json_nesting(const std::string& text, const std::string& fn, const std::string& label);

/// Parses JSON after the nesting check; a syntax error is an InputError naming `label` and
/// nlohmann's byte position.
nlohmann::json parse_json_text(const std::string& text, const std::string& fn, const std::string& label);

/// read_text_file (limit: max_text_bytes) + parse_json_text.
nlohmann::json read_json_file(const std::string& path, const std::string& fn, const std::string& what);

/// Typed reads of j[key] for configuration files: InputError "WHERE: key 'KEY' must be ..., but is
/// VALUE" when it is missing, of another type, or (integers) outside `range` or the target type.
std::string json_string(const nlohmann::json& j, const char* key, const std::string& where);
long long json_int(const nlohmann::json& j, const char* key, const std::string& where, const IntRange& range);
std::uint64_t json_uint64(const nlohmann::json& j, const char* key, const std::string& where);
double json_real(const nlohmann::json& j, const char* key, const std::string& where);
bool json_bool(const nlohmann::json& j, const char* key, const std::string& where);
/// Short text of an untrusted JSON value for a message (at most ~60 characters).
std::string json_brief(const nlohmann::json& v);

}  // namespace arcal
