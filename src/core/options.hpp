// Option tables: one row per option of a command family (name, type via the field it sets, default =
// the struct's initial value, range, allowed values, help, flag and TOML key), so that the CLI11 flags
// (apps/arcal/option_binding.hpp), the study file's TOML table (run/study_file.cpp), validation, `--help`,
// the saved configuration and the run identity (a hash of the canonical typed configuration) all come
// from one place. Standard library and nlohmann-json only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <cstdint>
#include <string>
#include <variant>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/check.hpp"
#include "core/hash.hpp"
#include "core/limits.hpp"

namespace arcal {

/// The range of a numeric option: none, integers [lo, hi] or reals (core/limits.hpp).
using OptionRange = std::variant<std::monostate, IntRange, RealRange>;

template <class C>
struct Option {
  using Field = std::variant<int C::*, std::int64_t C::*, std::uint64_t C::*, double C::*, bool C::*, std::string C::*,
                             std::vector<std::string> C::*, std::vector<double> C::*, std::vector<std::uint64_t> C::*,
                             std::vector<std::int64_t> C::*>;
  /// What a path option must name on the command line (CLI11's ExistingFile, ExistingDirectory,
  /// ExistingPath: either).
  enum class Path { any, existing_file, existing_directory, existing_path };
  std::string key;   ///< canonical name: the TOML key and the key of the typed JSON ("permutations")
  std::string flag;  ///< CLI flag ("--permutations"); "" = no flag (set by the study only)
  std::string help;
  Field field;
  OptionRange range;                 ///< numbers (each element of a list)
  std::vector<std::string> choices;  ///< strings (each element of a list): allowed values; empty = any
  bool negatable = false;            ///< booleans: also --no-FLAG
  bool identity = true;              ///< part of the run identity hash (threads and paths are not)
  std::string section;               ///< the study file's table holding this key ("" = not in the study)
  /// Command line only (apps/arcal/option_binding.hpp): the option must be given; a path must exist.
  /// A flag without a leading '-' ("file", "traces") is positional.
  bool required = false;
  Path path = Path::any;

  /// The tables list rows as {key, flag, help, field[, range, choices, negatable, identity, section]}; a
  /// constructor (not aggregate initialisation) so rows that stop early are not -Wmissing-field-initializers.
  Option(std::string key_, std::string flag_, std::string help_, Field field_, OptionRange range_ = {},
         std::vector<std::string> choices_ = {}, bool negatable_ = false, bool identity_ = true,
         std::string section_ = "")
      : key(std::move(key_)),
        flag(std::move(flag_)),
        help(std::move(help_)),
        field(field_),
        range(range_),
        choices(std::move(choices_)),
        negatable(negatable_),
        identity(identity_),
        section(std::move(section_)) {}

  /// Table rows that must be given or name an existing path: `Option(...).given()`,
  /// `.existing(Path::existing_file)`.
  Option given() const {
    Option o = *this;
    o.required = true;
    return o;
  }
  Option existing(Path p) const {
    Option o = *this;
    o.path = p;
    return o;
  }
  bool positional() const { return !flag.empty() && flag[0] != '-'; }
};

template <class C>
using OptionTable = std::vector<Option<C>>;

namespace options_detail {
template <class T>
std::string value_text(const T& v) {
  if constexpr (std::is_floating_point_v<T>) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", double(v));  // nan and inf print as such (JSON would say null)
    return buf;
  } else {
    return nlohmann::json(v).dump();
  }
}
template <class T>
std::string list_text(const std::vector<T>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += value_text(v[i]);  // not "," + text: GCC 12 warns (-Wrestrict, a false positive) on that operator+
  }
  return s + "]";
}
inline bool numeric_ok(const OptionRange& r, double v) {
  if (std::holds_alternative<IntRange>(r))
    return std::floor(v) == v && in_range(std::get<IntRange>(r), static_cast<long long>(v));
  if (std::holds_alternative<RealRange>(r)) return in_range(std::get<RealRange>(r), v);
  return std::isfinite(v);
}
inline std::string range_of(const OptionRange& r) {
  if (std::holds_alternative<IntRange>(r)) return range_text(std::get<IntRange>(r));
  if (std::holds_alternative<RealRange>(r)) return range_text(std::get<RealRange>(r));
  return "finite";
}
}  // namespace options_detail

/// Checks every option's range and allowed values. Throws InputError "`where` NAME = VALUE is
/// outside RANGE" naming the flag (or, with by_key or for options without a flag, the key).
template <class C>
void check_options(const OptionTable<C>& table, const C& c, const std::string& where, bool by_key = false) {
  for (const auto& o : table) {
    const std::string name = o.flag.empty() || by_key ? o.key : o.flag;
    auto bad = [&](const std::string& value, const std::string& rule) {
      throw_input(where, name + " = " + value + " " + rule);
    };
    std::visit(
        [&](auto member) {
          const auto& v = c.*member;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) {
          } else if constexpr (std::is_arithmetic_v<T>) {
            if (!options_detail::numeric_ok(o.range, double(v)))
              bad(options_detail::value_text(v), "is outside " + options_detail::range_of(o.range));
          } else if constexpr (std::is_same_v<T, std::string>) {
            if (!o.choices.empty() && std::find(o.choices.begin(), o.choices.end(), v) == o.choices.end())
              bad("\"" + v + "\"", "is not one of " + nlohmann::json(o.choices).dump());
          } else {
            for (const auto& x : v) {
              using E = std::decay_t<decltype(x)>;
              if constexpr (std::is_same_v<E, std::string>) {
                if (!o.choices.empty() && std::find(o.choices.begin(), o.choices.end(), x) == o.choices.end())
                  bad(nlohmann::json(v).dump(),
                      "holds \"" + x + "\", which is not one of " + nlohmann::json(o.choices).dump());
              } else if (!options_detail::numeric_ok(o.range, double(x))) {
                bad(options_detail::list_text(v),
                    "holds " + options_detail::value_text(x) + ", outside " + options_detail::range_of(o.range));
              }
            }
          }
        },
        o.field);
  }
}

/// The typed configuration as a JSON object keyed by option key (every option, in table order).
template <class C>
nlohmann::json options_json(const OptionTable<C>& table, const C& c) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& o : table) std::visit([&](auto member) { j[o.key] = c.*member; }, o.field);
  return j;
}

/// Reads options_json back (keys absent keep the struct's defaults; unknown keys and wrong types throw
/// InputError naming `where` and the key), then check_options.
template <class C>
void options_from_json(const OptionTable<C>& table, const nlohmann::json& j, C& c, const std::string& where) {
  if (!j.is_object()) throw_input(where, "the configuration must be a JSON object");
  for (const auto& item : j.items()) {
    // Named references, not a structured binding: the lambdas below capture them, which clang 14
    // (the fuzzing compiler) does not allow for bindings.
    const std::string& k = item.key();
    const nlohmann::json& v = item.value();
    const auto it = std::find_if(table.begin(), table.end(), [&](const Option<C>& o) { return o.key == k; });
    if (it == table.end()) {
      std::string known;
      for (const auto& o : table) known += (known.empty() ? "" : ", ") + o.key;
      throw_input(where, "unknown option '" + k + "' (options: " + known + ")");
    }
    std::visit(
        [&](auto member) {
          using T = std::decay_t<decltype(c.*member)>;
          auto wrong = [&](const std::string& want) {
            throw_input(where, "'" + k + "' is " + v.dump() + ", but must be " + want);
          };
          if constexpr (std::is_same_v<T, bool>) {
            if (!v.is_boolean()) wrong("true or false");
          } else if constexpr (std::is_integral_v<T>) {
            // Integers must fit their field exactly (no wrap-around of 2^32 + 3 to 3, no 2.5 to 2).
            if (!v.is_number_integer()) wrong("an integer");
            if (v.is_number_unsigned()
                    ? v.template get<std::uint64_t>() > std::uint64_t(std::numeric_limits<T>::max())
                    : (v.template get<std::int64_t>() < std::int64_t(std::numeric_limits<T>::min()) ||
                       (v.template get<std::int64_t>() > 0 &&
                        std::uint64_t(v.template get<std::int64_t>()) > std::uint64_t(std::numeric_limits<T>::max()))))
              wrong("an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                    std::to_string(std::numeric_limits<T>::max()) + "]");
          } else if constexpr (std::is_floating_point_v<T>) {
            if (!v.is_number()) wrong("a number");
          }
          try {
            c.*member = v.template get<T>();
          } catch (const nlohmann::json::exception&) {
            wrong("of another type");
          }
        },
        it->field);
  }
  check_options(table, c, where, true);
}

/// Command-line flags that reproduce the configuration (every option with a flag whose value differs
/// from a default-constructed C; lists comma-joined): for display (arcal sweep --list), not for
/// passing configurations between processes (those pass options_json).
template <class C>
std::vector<std::string> options_flags(const OptionTable<C>& table, const C& c) {
  std::vector<std::string> out;
  const C defaults{};
  for (const auto& o : table) {
    if (o.flag.empty()) continue;
    std::visit(
        [&](auto member) {
          const auto& v = c.*member;
          if (v == defaults.*member) return;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) {
            out.push_back(v ? o.flag : "--no-" + o.flag.substr(2));
          } else if constexpr (std::is_same_v<T, std::string>) {
            out.insert(out.end(), {o.flag, v});
          } else if constexpr (std::is_arithmetic_v<T>) {
            out.insert(out.end(), {o.flag, nlohmann::json(v).dump()});
          } else {
            std::string joined;
            for (const auto& x : v) {
              if constexpr (std::is_same_v<std::decay_t<decltype(x)>, std::string>)
                joined += (joined.empty() ? "" : ",") + x;
              else
                joined += (joined.empty() ? "" : ",") + nlohmann::json(x).dump();
            }
            out.insert(out.end(), {o.flag, joined});
          }
        },
        o.field);
  }
  return out;
}

/// FNV-1a 64 of the canonical JSON of the identity options (sorted keys, nlohmann's number format):
/// the same typed configuration gives the same hash on every platform and build.
template <class C>
std::string options_hash(const OptionTable<C>& table, const C& c) {
  nlohmann::json j = nlohmann::json::object();  // std::map-ordered: canonical key order
  for (const auto& o : table)
    if (o.identity) std::visit([&](auto member) { j[o.key] = c.*member; }, o.field);
  return stable_hash(j.dump());
}

}  // namespace arcal
