// The report as a document model (sections of paragraphs, tables, figures and code) and its two
// renderings: one self-contained report.html (inline style; every figure embedded as an SVG data URI,
// so the file opens when mailed alone) and report.md (figures linked from figures/). Tables are also
// written as CSV. Presentation only: the sections (report/sections.hpp) decide what is shown.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace arcal::report {

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

struct Block {
  enum Kind { text, table, figure, pre, verdict } kind = text;
  std::string body;  ///< text, pre text, verdict text, or figure name
  std::string caption;
  Table t;
};

struct Section {
  std::string title;
  std::vector<Block> blocks;
  void p(const std::string& s) { blocks.push_back({Block::text, s, "", {}}); }
  void verdict(const std::string& s) { blocks.push_back({Block::verdict, s, "", {}}); }
  void fig(const std::string& name, const std::string& caption) {
    blocks.push_back({Block::figure, name, caption, {}});
  }
  void tab(Table t, const std::string& caption = "") { blocks.push_back({Block::table, "", caption, std::move(t)}); }
  void code(const std::string& s) { blocks.push_back({Block::pre, s, "", {}}); }
};

struct Document {
  std::string title;
  std::vector<Section> sections;
};

std::string html_escape(const std::string& s);
/// RFC 4648 base64 (the figures' data URIs).
std::string base64(const std::string& bytes);

/// report.html: `svg` maps a figure name to its SVG text (embedded as a data URI; a figure missing
/// from the map is linked as figures/NAME.svg instead), `widths` to its display width in pixels.
std::string render_html(const Document& doc, const std::map<std::string, std::string>& svg,
                        const std::map<std::string, int>& widths);
std::string render_markdown(const Document& doc);
/// CSV text of a table (io/csv.hpp quoting).
std::string table_csv(const Table& t);

}  // namespace arcal::report
