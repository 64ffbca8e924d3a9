// `arcal options-markdown FILE [--update]` (hidden; ctest `command_option_lists`): renders every
// subcommand's option list from the option tables bound to it (option_binding.hpp) and compares it with
// the text between `<!-- options:command:NAME -->` and `<!-- end:options:command:NAME -->` in FILE
// (docs/interface.md), or rewrites those blocks with --update. It refuses a subcommand holding an
// option that was added by hand instead of from a table, so every option has one row to edit and its
// documentation follows from it. Each executable checks the subcommands it holds (`arcal`: the
// analysis side; `arcal-torch`: those that need LibTorch).
#pragma once

#include <CLI/CLI.hpp>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "command.hpp"
#include "option_binding.hpp"

namespace arcal::cli {

inline int option_lists(CLI::App& app, const std::vector<CommandSpec>& registry, const std::string& path, bool update) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "arcal options-markdown: cannot read " << path << "\n";
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string old = ss.str();
  std::string doc = old;
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
    std::string body = command_table_header() + bound.rows;
    for (const auto& family : bound.families) body += "\nand every option of " + family + ".\n";
    if (!splice_option_list(doc, "command:" + spec.name, body)) {
      std::cerr << "arcal options-markdown: " << path << " lacks the markers <!-- options:command:" << spec.name
                << " --> ... <!-- end:options:command:" << spec.name << " -->\n";
      rc = 1;
    }
  }
  if (rc != 0 || doc == old) return rc;
  if (update) {
    std::ofstream(path) << doc;
    std::cout << "arcal options-markdown: rewrote the command option lists of " << path << "\n";
    return 0;
  }
  std::cerr << "arcal options-markdown: the command option lists of " << path
            << " differ from the option tables in the code; run `build/arcal options-markdown " << path
            << " --update` (and build/arcal-torch) and commit\n";
  return 1;
}

}  // namespace arcal::cli
