// The Markdown option lists of docs/interface.md, rendered from option tables (core/options.hpp):
// the family tables (training, audit: key, flag, type, default, range, study table, help; rendered by
// tests/docs/options_docs.cpp) and each subcommand's table (flag, type, default, range, help;
// rendered by `arcal options-markdown`, apps/arcal/main.cpp), and the splice of a rendered list
// between its `<!-- options:NAME -->` and `<!-- end:options:NAME -->` markers. Standard library and
// nlohmann-json only.
#pragma once

#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/options.hpp"

namespace arcal {

/// The type column: bool, integer, number, string, list of strings / numbers / integers.
template <class C>
std::string option_type_name(const typename Option<C>::Field& f) {
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

/// A Markdown table cell: '|' escaped, line breaks as spaces.
inline std::string markdown_cell(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

namespace options_detail {
template <class C>
std::string values_text(const Option<C>& opt) {
  std::string values;
  if (!opt.choices.empty()) {
    for (std::size_t i = 0; i < opt.choices.size(); ++i) values += (i ? ", " : "") + opt.choices[i];
  } else if (!std::holds_alternative<std::monostate>(opt.range)) {
    values = range_of(opt.range);
  }
  return values.empty() ? "-" : markdown_cell(values);
}
template <class C>
std::string flag_text(const Option<C>& opt) {
  if (opt.flag.empty()) return "-";
  if (opt.positional()) return "`" + opt.flag + "` (positional)";
  std::string flag = "`" + opt.flag + "`";
  if (opt.negatable) flag += " / `--no-" + opt.flag.substr(2) + "`";
  return flag;
}
}  // namespace options_detail

/// A command family's table (training, audit): one row per option with its key, flag, type, default
/// (`defaults`' value), range or allowed values, study-file table and help.
template <class C>
std::string family_table_markdown(const OptionTable<C>& table, const C& defaults = C{}) {
  const nlohmann::json d = options_json(table, defaults);
  std::ostringstream o;
  o << "| key | flag | type | default | range or values | study table | what it sets "
       "|\n|---|---|---|---|---|---|---|\n";
  for (const auto& opt : table)
    o << "| `" << opt.key << "` | " << options_detail::flag_text(opt) << " | " << option_type_name<C>(opt.field)
      << " | `" << markdown_cell(d[opt.key].dump()) << "` | " << options_detail::values_text(opt) << " | "
      << (opt.section.empty() ? "-" : "[" + opt.section + "]") << " | " << markdown_cell(opt.help) << " |\n";
  return o.str();
}

/// The rows of a subcommand's table (no header): flag, type, default ("required" for an option that
/// must be given; an empty string or list shows as "-"), range or allowed values, and help (with
/// "must exist" for paths checked on the command line).
template <class C>
std::string command_rows_markdown(const OptionTable<C>& table, const C& defaults) {
  const nlohmann::json d = options_json(table, defaults);
  std::ostringstream o;
  for (const auto& opt : table) {
    if (opt.flag.empty()) continue;
    const nlohmann::json& v = d[opt.key];
    const bool none = (v.is_string() && v.get<std::string>().empty()) || (v.is_array() && v.empty());
    const std::string def = opt.required ? "required" : none ? "-" : "`" + markdown_cell(v.dump()) + "`";
    std::string help = opt.help;
    if (opt.path == Option<C>::Path::existing_file) help += " (an existing file)";
    if (opt.path == Option<C>::Path::existing_directory) help += " (an existing directory)";
    if (opt.path == Option<C>::Path::existing_path) help += " (an existing file or directory)";
    o << "| " << options_detail::flag_text(opt) << " | " << option_type_name<C>(opt.field) << " | " << def << " | "
      << options_detail::values_text(opt) << " | " << markdown_cell(help) << " |\n";
  }
  return o.str();
}

/// The header of command_rows_markdown's rows.
inline const char* command_table_header() {
  return "| flag | type | default | range or values | what it sets |\n|---|---|---|---|---|\n";
}

/// Replaces the text between the markers `<!-- options:NAME -->` and `<!-- end:options:NAME -->` of
/// `doc` with `body`; false when the markers are missing.
inline bool splice_option_list(std::string& doc, const std::string& name, const std::string& body) {
  const std::string start = "<!-- options:" + name + " -->", end = "<!-- end:options:" + name + " -->";
  const std::size_t i = doc.find(start), j = doc.find(end);
  if (i == std::string::npos || j == std::string::npos || j < i) return false;
  doc = doc.substr(0, i + start.size()) + "\n" + body + doc.substr(j);
  return true;
}

/// Splices each (name, list) of `lists` into the marked blocks of the file `path` and compares the
/// result with the file, or with `update` rewrites the file (atomically). Returns 0 when the file
/// matches (or was rewritten), 1 when it differs or lacks a block's markers, 2 when it cannot be read;
/// messages go to `err` prefixed with `tool`, and name `fix`, the command that rewrites the lists.
inline int sync_option_lists(const std::string& path, const std::vector<std::pair<std::string, std::string>>& lists,
                             bool update, const std::string& tool, const std::string& fix, std::ostream& out,
                             std::ostream& err) {
  std::ifstream in(path);
  if (!in) {
    err << tool << ": cannot read " << path << "\n";
    return 2;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string old = ss.str();
  std::string doc = old;
  for (const auto& [name, body] : lists)
    if (!splice_option_list(doc, name, body)) {
      err << tool << ": " << path << " lacks the markers <!-- options:" << name << " --> ... <!-- end:options:" << name
          << " -->\n";
      return 1;
    }
  if (doc == old) return 0;
  if (update) {
    write_file_atomic(path, doc);
    out << tool << ": rewrote the option lists of " << path << "\n";
    return 0;
  }
  err << tool << ": the option lists of " << path << " differ from the option tables in the code; run `" << fix
      << "` and commit\n";
  return 1;
}

}  // namespace arcal
