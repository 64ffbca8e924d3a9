// The option lists of docs/interface.md, generated from the option tables (issue 56: the hand-written
// [audit] key list missed 4 of 29 keys). Renders one Markdown table per command family (the training
// family: `arcal train` and the study's [data]/[model]/[train] keys; the audit family: `arcal audit`,
// the study's [audit] keys and `arcal.audit`'s keyword arguments) and compares each with the text
// between `<!-- options:NAME -->` and `<!-- end:options:NAME -->` in the given file.
//
// usage: options_docs FILE [--update]   exit 0: the file matches (or was rewritten with --update);
//                                       1: it differs (the difference is printed); 2: bad usage
#include <fstream>
#include <iostream>
#include <sstream>
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
  std::ifstream in(path);
  if (!in) {
    std::cerr << "options_docs: cannot read " << path << "\n";
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string old = ss.str();
  std::string doc = old;
  for (const auto& [name, body] :
       {std::pair<std::string, std::string>{"train", family_table_markdown(train_option_table())},
        std::pair<std::string, std::string>{"audit", family_table_markdown(audit_option_table())}}) {
    if (!splice_option_list(doc, name, body)) {
      std::cerr << "options_docs: " << path << " lacks the markers <!-- options:" << name
                << " --> ... <!-- end:options:" << name << " -->\n";
      return 1;
    }
  }
  if (doc == old) return 0;
  if (argc == 3) {
    std::ofstream(path) << doc;
    std::cout << "options_docs: rewrote the option tables of " << path << "\n";
    return 0;
  }
  std::cerr << "options_docs: the option tables of " << path
            << " differ from the option tables in the code; run `build/tests/options_docs " << path
            << " --update` and commit. Generated:\n"
            << doc.substr(doc.find("<!-- options:train -->")) << "\n";
  return 1;
}
