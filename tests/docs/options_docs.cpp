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
#include <type_traits>

#include "audit/audit_options.hpp"
#include "core/options.hpp"
#include "train/train_config.hpp"

namespace {

using namespace arcal;

template <class C>
std::string type_of(const typename Option<C>::Field& f) {
  return std::visit(
      [](auto member) -> std::string {
        using T = std::remove_reference_t<decltype(std::declval<C&>().*member)>;
        if constexpr (std::is_same_v<T, bool>)
          return "bool";
        else if constexpr (std::is_integral_v<T>)
          return "integer";
        else if constexpr (std::is_floating_point_v<T>)
          return "number";
        else if constexpr (std::is_same_v<T, std::string>)
          return "string";
        else if constexpr (std::is_same_v<T, std::vector<std::string>>)
          return "list of strings";
        else if constexpr (std::is_same_v<T, std::vector<double>>)
          return "list of numbers";
        else
          return "list of integers";
      },
      f);
}

std::string cell(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

template <class C>
std::string table_markdown(const OptionTable<C>& table) {
  const nlohmann::json defaults = options_json(table, C{});
  std::ostringstream o;
  o << "| key | flag | type | default | range or values | study table | what it sets "
       "|\n|---|---|---|---|---|---|---|\n";
  for (const auto& opt : table) {
    std::string values;
    if (!opt.choices.empty()) {
      for (std::size_t i = 0; i < opt.choices.size(); ++i) values += (i ? ", " : "") + opt.choices[i];
    } else if (!std::holds_alternative<std::monostate>(opt.range)) {
      values = options_detail::range_of(opt.range);
    }
    const std::string def = defaults.contains(opt.key) ? defaults[opt.key].dump() : "";
    std::string flag = opt.flag.empty() ? "-" : "`" + opt.flag + "`";
    if (opt.negatable && !opt.flag.empty()) flag += " / `--no-" + opt.flag.substr(2) + "`";
    o << "| `" << opt.key << "` | " << flag << " | " << type_of<C>(opt.field) << " | `" << cell(def) << "` | "
      << (values.empty() ? "-" : cell(values)) << " | " << (opt.section.empty() ? "-" : "[" + opt.section + "]")
      << " | " << cell(opt.help) << " |\n";
  }
  return o.str();
}

/// Replaces the text between the markers of `name`; false when they are missing.
bool splice(std::string& doc, const std::string& name, const std::string& body) {
  const std::string start = "<!-- options:" + name + " -->", end = "<!-- end:options:" + name + " -->";
  const std::size_t i = doc.find(start), j = doc.find(end);
  if (i == std::string::npos || j == std::string::npos || j < i) return false;
  doc = doc.substr(0, i + start.size()) + "\n" + body + doc.substr(j);
  return true;
}

}  // namespace

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
       {std::pair<std::string, std::string>{"train", table_markdown(train_option_table())},
        std::pair<std::string, std::string>{"audit", table_markdown(audit_option_table())}}) {
    if (!splice(doc, name, body)) {
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
