// The option lists of docs/interface.md, generated from the option tables (issue 56: the hand-written
// [audit] key list missed 4 of 29 keys). Renders one Markdown table per command family (the training
// family: `arcal train` and the study's [data]/[model]/[train] keys; the audit family: `arcal audit`,
// the study's [audit] keys and `arcal.audit`'s keyword arguments) and compares each with the text
// between `<!-- options:NAME -->` and `<!-- end:options:NAME -->` in the given file.
//
// usage: options_docs FILE [--update]   exit 0: the file matches (or was rewritten with --update);
//                                       1: it differs (the difference is printed); 2: bad usage
#include <iostream>
#include <string>

#include "audit/audit_options.hpp"
#include "core/options_markdown.hpp"
#include "train/train_config.hpp"

using namespace arcal;

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3 || (argc == 3 && std::string(argv[2]) != "--update")) {
    std::cerr << "usage: options_docs FILE [--update]\n";
    return 2;
  }
  const std::string path = argv[1];
  return sync_option_lists(
      path,
      {{"train", family_table_markdown(train_option_table())}, {"audit", family_table_markdown(audit_option_table())}},
      argc == 3, "options_docs", "build/tests/options_docs " + path + " --update", std::cout, std::cerr);
}
