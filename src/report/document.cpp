#include "report/document.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "io/csv.hpp"

namespace arcal::report {

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string base64(const std::string& bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (unsigned(static_cast<unsigned char>(bytes[i])) << 16) |
                       (unsigned(static_cast<unsigned char>(bytes[i + 1])) << 8) |
                       unsigned(static_cast<unsigned char>(bytes[i + 2]));
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += k[v & 63];
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = unsigned(static_cast<unsigned char>(bytes[i])) << 16;
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const unsigned v = (unsigned(static_cast<unsigned char>(bytes[i])) << 16) |
                       (unsigned(static_cast<unsigned char>(bytes[i + 1])) << 8);
    out += k[(v >> 18) & 63];
    out += k[(v >> 12) & 63];
    out += k[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

namespace {

const char* kStyle =
    "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;max-width:1150px;margin:2em auto;padding:0 "
    "1em;"
    "color:#222;line-height:1.45}\nh1{border-bottom:2px solid #08306b}h2{margin-top:2em;border-bottom:1px solid #ccc}\n"
    "table{border-collapse:collapse;margin:0.8em 0;font-size:0.86em}td,th{border:1px solid #ccc;padding:3px 7px;"
    "text-align:left}th{background:#eef3f8}tr:nth-child(even) td{background:#fafafa}\n"
    "figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}figcaption{font-size:0.9em;color:#555}\n"
    "pre{background:#f6f8fa;padding:0.8em;overflow-x:auto;font-size:0.85em}\n"
    ".verdict{font-size:1.12em;background:#eef3f8;border-left:5px solid #08306b;padding:0.7em 1em;margin:1em 0}\n"
    "nav{font-size:0.9em}nav a{margin-right:1em}\n"
    "details{margin:0.8em 0}summary{cursor:pointer;color:#08306b;font-size:0.92em}\n"
    "table{display:block;max-width:100%;overflow-x:auto}td{overflow-wrap:anywhere}\n";

std::string anchor(const std::string& title) {
  std::string a;
  for (char c : title)
    a += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(static_cast<unsigned char>(c))) : '-';
  return a;
}

/// Tables longer than this are collapsed (a <details> the reader opens; its CSV is in tables/): the
/// default study's report was 15,750 px tall with 213 table rows on its first pages.
constexpr std::size_t kCollapseRows = 12;

void html_table(std::ostringstream& html, const Block& bl) {
  const bool collapse = bl.t.rows.size() > kCollapseRows;
  if (collapse)
    html << "<details><summary>" << bl.t.rows.size() << " rows: "
         << html_escape(bl.caption.empty() ? std::string("the table") : bl.caption.substr(0, bl.caption.find(". ") + 1))
         << " (open)</summary>\n";
  html << "<table><tr>";
  for (const auto& h : bl.t.header) html << "<th>" << html_escape(h) << "</th>";
  html << "</tr>\n";
  for (const auto& row : bl.t.rows) {
    html << "<tr>";
    for (const auto& c : row) html << "<td>" << html_escape(c) << "</td>";
    html << "</tr>\n";
  }
  html << "</table>\n";
  if (!bl.caption.empty()) html << "<p><em>" << html_escape(bl.caption) << "</em></p>\n";
  if (collapse) html << "</details>\n";
}

/// Text as Markdown shows it literally: names from the data (a trace's meta, run names) can hold
/// HTML, which Markdown renderers pass through (a `<script>` in a model name), or Markdown syntax. HTML's
/// three characters become entities; Markdown's punctuation is backslash-escaped; a line break is a
/// space (a name cannot start a new block or a table row).
std::string md_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '\\':
      case '`':
      case '*':
      case '_':
      case '[':
      case ']':
      case '#':
      case '|':
      case '!':
        out += '\\';
        out += c;
        break;
      case '\n':
      case '\r': out += ' '; break;
      default: out += c;
    }
  }
  return out;
}

/// A code fence longer than any run of backticks in `body`, so the body cannot close it.
std::string md_fence(const std::string& body) {
  std::size_t longest = 0, run = 0;
  for (char c : body) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<std::size_t>(3, longest + 1), '`');
}

void md_table(std::ostringstream& md, const Block& bl) {
  md << "|";
  for (const auto& h : bl.t.header) md << " " << md_escape(h) << " |";
  md << "\n|";
  for (std::size_t i = 0; i < bl.t.header.size(); ++i) md << "---|";
  md << "\n";
  for (const auto& row : bl.t.rows) {
    md << "|";
    for (const auto& c : row) md << " " << md_escape(c) << " |";
    md << "\n";
  }
  md << "\n";
  if (!bl.caption.empty()) md << "*" << md_escape(bl.caption) << "*\n\n";
}

}  // namespace

std::string render_html(const Document& doc, const std::map<std::string, std::string>& svg,
                        const std::map<std::string, int>& widths) {
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(doc.title)
       << "</title>\n<style>\n"
       << kStyle << "</style></head><body>\n<h1>" << html_escape(doc.title) << "</h1>\n<nav>";
  for (const auto& sec : doc.sections)
    html << "<a href=\"#" << anchor(sec.title) << "\">" << html_escape(sec.title) << "</a>";
  html << "</nav>\n";
  for (const auto& sec : doc.sections) {
    html << "<h2 id=\"" << anchor(sec.title) << "\">" << html_escape(sec.title) << "</h2>\n";
    for (const auto& bl : sec.blocks) {
      switch (bl.kind) {
        case Block::text: html << "<p>" << html_escape(bl.body) << "</p>\n"; break;
        case Block::verdict: html << "<p class=\"verdict\">" << html_escape(bl.body) << "</p>\n"; break;
        case Block::pre: html << "<pre>" << html_escape(bl.body) << "</pre>\n"; break;
        case Block::table: html_table(html, bl); break;
        case Block::figure: {
          const auto it = svg.find(bl.body);
          const auto w = widths.find(bl.body);
          const std::string src =
              it != svg.end() ? "data:image/svg+xml;base64," + base64(it->second) : "figures/" + bl.body + ".svg";
          html << "<figure><img style=\"width:" << (w != widths.end() ? w->second : 800) << "px\" src=\"" << src
               << "\" alt=\"" << html_escape(bl.caption) << "\"><figcaption>" << html_escape(bl.caption) << " (figures/"
               << html_escape(bl.body) << ".dat and .gp: the data and the gnuplot script)</figcaption></figure>\n";
          break;
        }
      }
    }
  }
  html << "<p style=\"color:#777;font-size:0.8em\">Written by arcal " << ARCAL_VERSION
       << " from results.json; tables as CSV in tables/, figures with their data and gnuplot scripts in figures/.</p>\n"
       << "</body></html>\n";
  return html.str();
}

std::string render_markdown(const Document& doc) {
  std::ostringstream md;
  md << "# " << md_escape(doc.title) << "\n\n";
  for (const auto& sec : doc.sections) {
    md << "## " << md_escape(sec.title) << "\n\n";
    for (const auto& bl : sec.blocks) {
      switch (bl.kind) {
        case Block::text: md << md_escape(bl.body) << "\n\n"; break;
        case Block::verdict: md << "> **" << md_escape(bl.body) << "**\n\n"; break;
        case Block::pre: {
          const std::string fence = md_fence(bl.body);
          md << fence << "toml\n"
             << bl.body << (bl.body.empty() || bl.body.back() == '\n' ? "" : "\n") << fence << "\n\n";
          break;
        }
        case Block::table: md_table(md, bl); break;
        case Block::figure:
          md << "![" << md_escape(bl.caption) << "](figures/" << bl.body << ".svg)\n\n*" << md_escape(bl.caption)
             << "* (data: `figures/" << bl.body << ".dat`, script: `figures/" << bl.body << ".gp`)\n\n";
          break;
      }
    }
  }
  return md.str();
}

std::string table_csv(const Table& t) {
  std::ostringstream o;
  for (std::size_t i = 0; i < t.header.size(); ++i) o << (i ? "," : "") << csv_field(t.header[i]);
  o << "\n";
  for (const auto& r : t.rows) {
    for (std::size_t i = 0; i < r.size(); ++i) o << (i ? "," : "") << csv_field(r[i]);
    o << "\n";
  }
  return o.str();
}

}  // namespace arcal::report
