// CLI11 flags from an option table (core/options.hpp): one add_option/add_flag per row with its help,
// default, range check (flag_checks.hpp), allowed values, and for lists comma-separated values; a row
// whose flag has no leading '-' is positional, `given()` rows are required and `existing(...)` rows
// must name an existing file or directory. The values land in the typed configuration; check_options
// runs again on the whole struct where a command needs it. Every bound row is also recorded for
// `arcal options-markdown` (apps/arcal/main.cpp), which renders each command's option list for
// docs/interface.md and refuses an option that was added by hand instead of from a table.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <type_traits>

#include "core/options_markdown.hpp"
#include "flag_checks.hpp"

namespace arcal::cli {

/// What the tables bound to one subcommand contributed: the Markdown rows of its option list (in
/// binding order) and the CLI11 options they made.
struct BoundOptions {
  /// Render the Markdown rows of each table bound here (called only by `arcal options-markdown`, so an
  /// ordinary start-up renders nothing).
  std::vector<std::function<std::string()>> rows;
  std::vector<std::string> families;  ///< family tables bound here, documented once in their own list
  std::set<const CLI::Option*> options;
};

/// Keyed by subcommand name; filled by bind_options while main.cpp sets up the subcommands.
inline std::map<std::string, BoundOptions>& bound_options() {
  static std::map<std::string, BoundOptions> registry;
  return registry;
}

/// Returns (key, option) for every flag added, so a command can tell which were given. `family`
/// names a command family's table (training, audit) whose rows docs/interface.md lists once on their
/// own; the command's list then refers to it instead of repeating them.
template <class C>
std::vector<std::pair<std::string, CLI::Option*>> bind_options(CLI::App& app, const OptionTable<C>& table, C& c,
                                                               const std::string& family = "") {
  std::vector<std::pair<std::string, CLI::Option*>> added;
  BoundOptions& record = bound_options()[app.get_name()];
  if (family.empty())
    // The defaults are c's values now, before parsing; tables are static, so the reference stays valid.
    record.rows.push_back([&table, defaults = c] { return command_rows_markdown(table, defaults); });
  else
    record.families.push_back(family);
  for (const auto& o : table) {
    if (o.flag.empty()) continue;
    std::visit(
        [&](auto member) {
          auto& v = c.*member;
          using T = std::decay_t<decltype(v)>;
          CLI::Option* opt = nullptr;
          if constexpr (std::is_same_v<T, bool>) {
            const std::string name = o.negatable ? o.flag + ",!--no-" + o.flag.substr(2) : o.flag;
            opt = app.add_flag(name, v, o.help + (o.negatable ? (v ? " (default on)" : " (default off)") : ""));
          } else {
            opt = app.add_option(o.flag, v, o.help);
            opt->capture_default_str();
            if constexpr (!std::is_arithmetic_v<T> && !std::is_same_v<T, std::string>) {
              if (!o.positional()) opt->delimiter(',');  // positional lists are whole paths
            }
            if constexpr (std::is_same_v<T, std::uint64_t>) {
              if (std::holds_alternative<std::monostate>(o.range)) opt->check(seed_check());
            }
            if (std::holds_alternative<IntRange>(o.range)) {
              if constexpr (!std::is_same_v<T, std::string> && !std::is_same_v<T, std::vector<std::string>>)
                opt->check(in_range(std::get<IntRange>(o.range)));
            } else if (std::holds_alternative<RealRange>(o.range)) {
              if constexpr (!std::is_same_v<T, std::string> && !std::is_same_v<T, std::vector<std::string>>)
                opt->check(in_range(std::get<RealRange>(o.range)));
            }
            if (!o.choices.empty()) {
              if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, std::vector<std::string>>)
                opt->check(CLI::IsMember(o.choices));
            }
            if (o.path == Option<C>::Path::existing_file) opt->check(CLI::ExistingFile);
            if (o.path == Option<C>::Path::existing_directory) opt->check(CLI::ExistingDirectory);
            if (o.path == Option<C>::Path::existing_path) opt->check(CLI::ExistingPath);
          }
          if (o.required) opt->required();
          added.push_back({o.key, opt});
          record.options.insert(opt);
        },
        o.field);
  }
  return added;
}

}  // namespace arcal::cli
