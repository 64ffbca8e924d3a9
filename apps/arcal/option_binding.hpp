// CLI11 flags from an option table (core/options.hpp): one add_option/add_flag per row with its help,
// default, range check (flag_checks.hpp) and, for lists, comma-separated values. The values land in
// the typed configuration; check_options runs again on the whole struct before use.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <type_traits>

#include "core/options.hpp"
#include "flag_checks.hpp"

namespace arcal::cli {

/// Returns (key, option) for every flag added, so a command can tell which were given.
template <class C>
std::vector<std::pair<std::string, CLI::Option*>> bind_options(CLI::App& app, const OptionTable<C>& table, C& c) {
  std::vector<std::pair<std::string, CLI::Option*>> added;
  for (const auto& o : table) {
    if (o.flag.empty()) continue;
    std::visit(
        [&](auto member) {
          auto& v = c.*member;
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, bool>) {
            const std::string name = o.negatable ? o.flag + ",!--no-" + o.flag.substr(2) : o.flag;
            added.push_back(
                {o.key, app.add_flag(name, v, o.help + (o.negatable ? (v ? " (default on)" : " (default off)") : ""))});
          } else {
            CLI::Option* opt = app.add_option(o.flag, v, o.help);
            added.push_back({o.key, opt});
            opt->capture_default_str();
            if constexpr (!std::is_arithmetic_v<T> && !std::is_same_v<T, std::string>) opt->delimiter(',');
            if constexpr (std::is_same_v<T, std::uint64_t>) {
              if (std::holds_alternative<std::monostate>(o.range)) opt->check(seed_check());
            }
            if (std::holds_alternative<IntRange>(o.range)) {
              if constexpr (std::is_arithmetic_v<T>) opt->check(in_range(std::get<IntRange>(o.range)));
            } else if (std::holds_alternative<RealRange>(o.range)) {
              if constexpr (std::is_arithmetic_v<T>) opt->check(in_range(std::get<RealRange>(o.range)));
            }
            if (!o.choices.empty()) {
              if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<std::string>>)
                opt->check(CLI::IsMember(o.choices));
            }
          }
        },
        o.field);
  }
  return added;
}

}  // namespace arcal::cli
