// `arcal options-markdown FILE [--update]` (hidden; ctest `command_option_lists`): renders every
// subcommand's option list from the option tables bound to it (option_binding.hpp) and compares it with
// the text between `<!-- options:command:NAME -->` and `<!-- end:options:command:NAME -->` in FILE
// (docs/interface.md), or rewrites those blocks with --update. It refuses a subcommand holding an
// option that was added by hand instead of from a table, so every option has one row to edit and its
// documentation follows from it. Each executable checks the subcommands it holds (`arcal`: the
// analysis side; `arcal-torch`: those that need LibTorch).
#pragma once

#include <CLI/CLI.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "command.hpp"
#include "option_binding.hpp"

namespace arcal::cli {

inline int option_lists(CLI::App& app, const std::vector<CommandSpec>& registry, const std::string& path, bool update) {
  std::vector<std::pair<std::string, std::string>> lists;
  int rc = 0;
  for (const auto& spec : registry) {
    CLI::App* sub = app.get_subcommand(spec.name);
    const BoundOptions& bound = bound_options()[spec.name];
    std::string by_hand;
    for (const CLI::Option* opt : sub->get_options()) {
      if (opt == sub->get_help_ptr() || opt->get_name() == "--quiet" || bound.options.count(opt)) continue;
      by_hand += (by_hand.empty() ? "" : ", ") + opt->get_name();
    }
    if (!by_hand.empty()) {
      std::cerr << "arcal options-markdown: `arcal " << spec.name << "` has options added by hand, not from an "
                << "option table (core/options.hpp; apps/arcal/option_binding.hpp): " << by_hand << "\n";
      rc = 1;
    }
    std::string body = command_table_header();
    for (const auto& rows : bound.rows) body += rows();
    for (const auto& family : bound.families) body += "\nand every option of " + family + ".\n";
    lists.push_back({"command:" + spec.name, body});
  }
  if (rc != 0) return rc;
  return sync_option_lists(path, lists, update, "arcal options-markdown",
                           "build/arcal options-markdown " + path + " --update (and build/arcal-torch)", std::cout,
                           std::cerr);
}

}  // namespace arcal::cli
