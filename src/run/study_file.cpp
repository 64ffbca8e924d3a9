#include "run/study_file.hpp"

#include <toml.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/limits.hpp"
#include "core/text_input.hpp"
#include "model/config.hpp"

namespace arcal {

namespace {

const char* kFn = "study";

/// Shortest decimal form that reads back to the same double (0.05, not 0.050000000000000003).
std::string num(double v) {
  char buf[64];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

/// Typed reads of one key with errors naming the file and the key.
struct Reader {
  std::string file;
  std::string where(const std::string& table, const std::string& key) const {
    return file + ": [" + table + "] " + key;
  }
  [[noreturn]] void bad(const std::string& table, const std::string& key, const std::string& want) const {
    throw_input(kFn, where(table, key) + " must be " + want);
  }
  std::string str(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_string()) bad(t, k, "a string");
    return v.as_string().str;
  }
  std::int64_t integer(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_integer()) bad(t, k, "an integer");
    return v.as_integer();
  }
  /// An integer key read into an int field: values outside `r` are refused here, before any
  /// narrowing could turn 2^32 + 3 into 3.
  int bounded(const toml::value& v, const std::string& t, const std::string& k, const IntRange& r) const {
    const std::int64_t x = integer(v, t, k);
    if (!in_range(r, x)) bad(t, k, "an integer in " + range_text(r) + " (got " + std::to_string(x) + ")");
    return static_cast<int>(x);
  }
  double real(const toml::value& v, const std::string& t, const std::string& k) const {
    if (v.is_integer()) return double(v.as_integer());
    if (!v.is_floating()) bad(t, k, "a number");
    return v.as_floating();
  }
  bool boolean(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_boolean()) bad(t, k, "true or false");
    return v.as_boolean();
  }
  std::vector<std::string> strings(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_array()) bad(t, k, "an array of strings");
    std::vector<std::string> out;
    for (const auto& e : v.as_array()) {
      if (!e.is_string()) bad(t, k, "an array of strings");
      out.push_back(e.as_string().str);
    }
    return out;
  }
  double bounded_real(const toml::value& v, const std::string& t, const std::string& k, const RealRange& r) const {
    const double x = real(v, t, k);
    if (!in_range(r, x)) bad(t, k, "a number in " + range_text(r));
    return x;
  }
  std::vector<double> reals(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_array()) bad(t, k, "an array of numbers");
    std::vector<double> out;
    for (const auto& e : v.as_array()) out.push_back(real(e, t, k));
    return out;
  }
  std::vector<std::uint64_t> seeds(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_array()) bad(t, k, "an array of integers >= 0");
    std::vector<std::uint64_t> out;
    for (const auto& e : v.as_array()) {
      const auto s = integer(e, t, k);
      if (s < 0) bad(t, k, "an array of integers >= 0");
      out.push_back(std::uint64_t(s));
    }
    return out;
  }
  std::vector<std::int64_t> integers(const toml::value& v, const std::string& t, const std::string& k) const {
    if (!v.is_array()) bad(t, k, "an array of integers");
    std::vector<std::int64_t> out;
    for (const auto& e : v.as_array()) out.push_back(integer(e, t, k));
    return out;
  }
};

/// One option of an option table from its TOML value, typed by the field it sets; ranges and
/// choices are checked afterwards on the whole struct (check_options, by key).
template <class C>
void read_option(const Reader& r, const std::string& table, const Option<C>& o, const toml::value& v, C& c) {
  std::visit(
      [&](auto member) {
        auto& x = c.*member;
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          x = r.boolean(v, table, o.key);
        else if constexpr (std::is_same_v<T, std::string>)
          x = r.str(v, table, o.key);
        else if constexpr (std::is_same_v<T, double>)
          x = r.real(v, table, o.key);
        else if constexpr (std::is_same_v<T, std::vector<std::string>>)
          x = r.strings(v, table, o.key);
        else if constexpr (std::is_same_v<T, std::vector<double>>)
          x = r.reals(v, table, o.key);
        else if constexpr (std::is_same_v<T, std::vector<std::uint64_t>>)
          x = r.seeds(v, table, o.key);
        else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>)
          x = r.integers(v, table, o.key);
        else if constexpr (std::is_same_v<T, std::uint64_t>) {
          const auto i = r.integer(v, table, o.key);
          if (i < 0) r.bad(table, o.key, "an integer >= 0");
          x = std::uint64_t(i);
        } else {
          // int / int64: refused here when out of range, before narrowing could wrap the value.
          const auto i = r.integer(v, table, o.key);
          if (std::holds_alternative<IntRange>(o.range) && !in_range(std::get<IntRange>(o.range), i))
            r.bad(table, o.key,
                  "an integer in " + range_text(std::get<IntRange>(o.range)) + " (got " + std::to_string(i) + ")");
          x = static_cast<T>(i);
        }
      },
      o.field);
}

/// One option as a TOML line "key = value   # help".
template <class C>
std::string option_line(const Option<C>& o, const C& c);

/// A TOML basic string: quotes, backslashes and control characters escaped, so any value (a
/// data_dir with quotes or a newline) prints as TOML that reads back to itself.
std::string toml_string(const std::string& v) {
  std::string s = "\"";
  for (unsigned char ch : v) {
    switch (ch) {
      case '"': s += "\\\""; break;
      case '\\': s += "\\\\"; break;
      case '\n': s += "\\n"; break;
      case '\t': s += "\\t"; break;
      case '\r': s += "\\r"; break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          s += buf;
        } else {
          s += static_cast<char>(ch);
        }
    }
  }
  return s + "\"";
}

template <class T>
std::string list(const std::vector<T>& v, bool quote) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) s += ", ";
    std::ostringstream o;
    if constexpr (std::is_same_v<T, double>)
      o << num(v[i]);
    else
      o << v[i];
    s += quote ? toml_string(o.str()) : o.str();
  }
  return s + "]";
}

template <class C>
std::string option_line(const Option<C>& o, const C& c) {
  std::string value;
  std::visit(
      [&](auto member) {
        const auto& x = c.*member;
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>)
          value = x ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          value = toml_string(x);
        else if constexpr (std::is_same_v<T, double>)
          value = num(x);
        else if constexpr (std::is_same_v<T, std::vector<std::string>>)
          value = list(x, true);
        else if constexpr (std::is_same_v<T, std::vector<double>> || std::is_same_v<T, std::vector<std::uint64_t>> ||
                           std::is_same_v<T, std::vector<std::int64_t>>)
          value = list(x, false);
        else
          value = std::to_string(x);
      },
      o.field);
  std::string help = o.help;
  for (char& ch : help)
    if (ch == '\n') ch = ' ';
  return o.key + " = " + value + "   # " + help + "\n";
}

}  // namespace

FullAuditOptions default_study_audit() {
  FullAuditOptions a;
  a.probe_restarts = 5;
  a.sensitivity = true;
  a.exact_null = true;
  a.null_replicates = 100;
  a.threads = 2;
  return a;
}

TrainConfig default_study_train() {
  // The recipe of docs/results.md "A converged default study": all 57,000 training images for 10
  // epochs (since the fused operators of issue 26; 6 before: 84.0-84.4 %, 8 epochs 84.8 %), peak lr
  // 2e-3, beta 0.1 (at 0.5 the soft-binned ECE slowed learning: 80.5 % vs 82.8 % after 4 epochs),
  // bf16 autocast where the CPU computes bf16 natively (1.5x faster, accuracy unchanged).
  TrainConfig t;
  t.epochs = 10;
  t.train_subset = 0;
  t.lr = 2e-3;
  t.sbece_weight = 0.1;
  t.precision = "auto";
  return t;
}

StudyConfig default_study() { return StudyConfig{}; }

StudyConfig parse_study_toml(const std::string& path) {
  return parse_study_toml_text(read_text_file(path, kFn, "study file", input_limits().max_study_bytes), path);
}

void check_toml_shape(const std::string& text, const std::string& path) {
  const InputLimits& lim = input_limits();
  if (text.size() > lim.max_study_bytes)
    throw_input(kFn, path + ": study file is " + byte_size(text.size()) + ", more than the limit of " +
                         byte_size(lim.max_study_bytes));
  // A scan of the raw text, before toml11 sees it: toml11 parses nested arrays and tables
  // recursively (20,000 levels overflow the stack) and long arrays slowly, so nesting depth, the
  // components of dotted keys and the elements of each array are counted here. Strings and
  // comments are skipped exactly as TOML delimits them, so brackets inside them do not count.
  struct Frame {
    char kind;  // '[' array, '{' inline table
    std::uint64_t elements = 0;
    bool expect_value = true;  // arrays: the next non-blank starts an element
  };
  // TOML is UTF-8 without control characters other than tab, CR and LF. toml11 3.7 reads past the
  // end of its buffer on some invalid UTF-8 inside strings (found by tests/fuzz/fuzz_study_toml;
  // reproducer tests/fuzz/corpus/study_toml/crash-invalid-utf8), so such text never reaches it.
  {
    std::size_t ln = 1;
    for (std::size_t k = 0; k < text.size();) {
      const unsigned char ch = static_cast<unsigned char>(text[k]);
      if (ch == '\n') ++ln;
      if ((ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') || ch == 0x7f)
        throw_input(kFn, path + ": line " + std::to_string(ln) + ": control character " + std::to_string(int(ch)) +
                             " (TOML allows only tab, CR and LF)");
      const int len = ch < 0x80 ? 1 : (ch >> 5) == 6 ? 2 : (ch >> 4) == 14 ? 3 : (ch >> 3) == 30 ? 4 : 0;
      bool ok = len > 0 && k + std::size_t(len) <= text.size();
      for (int m = 1; ok && m < len; ++m) ok = (static_cast<unsigned char>(text[k + std::size_t(m)]) >> 6) == 2;
      if (ok && len == 2) ok = ch >= 0xC2;  // no overlong encodings
      if (ok && len == 3) {
        const unsigned char c1 = static_cast<unsigned char>(text[k + 1]);
        ok = !(ch == 0xE0 && c1 < 0xA0) && !(ch == 0xED && c1 >= 0xA0);  // overlong, surrogates
      }
      if (ok && len == 4) {
        const unsigned char c1 = static_cast<unsigned char>(text[k + 1]);
        ok = ch <= 0xF4 && !(ch == 0xF0 && c1 < 0x90) && !(ch == 0xF4 && c1 >= 0x90);
      }
      if (!ok) throw_input(kFn, path + ": line " + std::to_string(ln) + ": the file is not valid UTF-8 (TOML must be)");
      k += std::size_t(len);
    }
  }
  std::vector<Frame> stack;
  std::size_t i = 0, line = 1;
  const std::size_t n = text.size();
  bool key_context = true;  // reading a key (line start at the top level, or inside an inline table)
  bool line_start = true;
  int key_parts = 1;
  auto fail = [&](const std::string& what) { throw_input(kFn, path + ": line " + std::to_string(line) + ": " + what); };
  auto dot = [&] {
    if (++key_parts > lim.max_toml_key_depth)
      fail("a dotted key or table name has more than " + std::to_string(lim.max_toml_key_depth) + " parts (the limit)");
  };
  auto start_value = [&] {
    if (!stack.empty() && stack.back().kind == '[' && stack.back().expect_value) {
      stack.back().expect_value = false;
      if (++stack.back().elements > lim.max_toml_array_elements)
        fail("an array has more than " + std::to_string(lim.max_toml_array_elements) + " elements (the limit)");
    }
  };
  auto skip_string = [&] {
    const char q = text[i];
    const bool triple = i + 2 < n && text[i + 1] == q && text[i + 2] == q;
    i += triple ? 3 : 1;
    while (i < n) {
      const char ch = text[i];
      if (ch == '\\' && q == '"') {
        i += 2;
        continue;
      }
      if (ch == '\n') {
        if (!triple) return;  // unterminated single-line string: toml11 reports it
        ++line;
      }
      if (ch == q) {
        if (!triple) {
          ++i;
          return;
        }
        if (i + 2 < n && text[i + 1] == q && text[i + 2] == q) {
          i += 3;
          while (i < n && text[i] == q) ++i;  // up to two quotes may end the content
          return;
        }
      }
      ++i;
    }
  };
  while (i < n) {
    const char ch = text[i];
    if (ch == '\n') {
      ++line;
      ++i;
      if (stack.empty()) {
        key_context = true;
        line_start = true;
        key_parts = 1;
      }
      continue;
    }
    if (ch == ' ' || ch == '\t' || ch == '\r') {
      ++i;
      continue;
    }
    if (ch == '#') {
      while (i < n && text[i] != '\n') ++i;
      continue;
    }
    if (ch == '"' || ch == '\'') {
      if (!key_context) start_value();
      skip_string();
      line_start = false;
      continue;
    }
    if (stack.empty() && line_start && ch == '[') {  // [table] or [[array of tables]]
      key_parts = 1;
      ++i;
      while (i < n && text[i] != ']' && text[i] != '\n') {
        if (text[i] == '"' || text[i] == '\'') {
          skip_string();
          continue;
        }
        if (text[i] == '.') dot();
        ++i;
      }
      while (i < n && text[i] == ']') ++i;
      line_start = false;
      key_context = false;
      continue;
    }
    line_start = false;
    if (key_context) {
      if (ch == '.') dot();
      if (ch == '=') key_context = false;
      if (ch == '}' && !stack.empty() && stack.back().kind == '{') {  // empty inline table
        stack.pop_back();
        key_context = false;
      }
      ++i;
      continue;
    }
    if (ch == '[' || ch == '{') {
      start_value();
      if (stack.size() >= std::size_t(lim.max_nesting))
        fail("arrays and inline tables nested more than " + std::to_string(lim.max_nesting) + " deep (the limit)");
      stack.push_back({ch});
      if (ch == '{') {
        key_context = true;
        key_parts = 1;
      }
      ++i;
      continue;
    }
    if (ch == ']' || ch == '}') {
      if (!stack.empty()) stack.pop_back();
      ++i;
      continue;
    }
    if (ch == ',') {
      if (!stack.empty() && stack.back().kind == '[') stack.back().expect_value = true;
      if (!stack.empty() && stack.back().kind == '{') {
        key_context = true;
        key_parts = 1;
      }
      ++i;
      continue;
    }
    start_value();
    ++i;
  }
}

/// toml11's multi-line error (message, "--> file", the source line with a caret, hints) as one line:
/// "message (line N: source: what the caret says)". arcal's errors are one line on stderr.
std::string one_line_toml_error(const std::string& what) {
  std::istringstream in(what);
  std::string line, head, where;
  while (std::getline(in, line)) {
    const auto b = line.find_first_not_of(" \t");
    if (b == std::string::npos) continue;
    line = line.substr(b);
    if (line.rfind("-->", 0) == 0 || line.rfind("Hint:", 0) == 0 || line == "|") continue;
    const auto bar = line.find(" | ");
    if (bar != std::string::npos && line.find_first_not_of("0123456789") == bar) {
      where += (where.empty() ? "" : "; ") + std::string("line ") + line.substr(0, bar) + ": " + line.substr(bar + 3);
    } else if (line.rfind("| ", 0) == 0) {
      std::string note = line.substr(2);
      note.erase(0, note.find_first_not_of(" ^-~"));
      if (!note.empty()) where += " (" + note + ")";
    } else {
      head += (head.empty() ? "" : " ") + line;
    }
  }
  return where.empty() ? head : head + " [" + where + "]";
}

StudyConfig parse_study_toml_text(const std::string& text, const std::string& path) {
  check_toml_shape(text, path);
  toml::value root;
  try {
    std::istringstream in(text);
    root = toml::parse(in, path);
  } catch (const std::exception& e) {
    throw_input(kFn, "study file '" + path + "' is not valid TOML: " + one_line_toml_error(e.what()));
  }
  StudyConfig c = default_study();
  Reader r{path};
  using Setter = std::function<void(const toml::value&)>;
  // table -> key -> setter; "" is the top level.
  std::map<std::string, std::map<std::string, Setter>> keys;
  keys[""]["name"] = [&](const toml::value& v) { c.name = r.str(v, "", "name"); };
  keys["data"]["datasets"] = [&](const toml::value& v) { c.datasets = r.strings(v, "data", "datasets"); };
  keys["model"]["presets"] = [&](const toml::value& v) { c.models = r.strings(v, "model", "presets"); };
  keys["model"]["residuals"] = [&](const toml::value& v) { c.residuals = r.strings(v, "model", "residuals"); };
  keys["model"]["standard_twin"] = [&](const toml::value& v) {
    c.standard_twin = r.boolean(v, "model", "standard_twin");
  };
  keys["train"]["seeds"] = [&](const toml::value& v) { c.seeds = r.seeds(v, "train", "seeds"); };
  for (const auto& o : train_option_table())
    if (!o.section.empty())
      keys[o.section][o.key] = [&, opt = &o](const toml::value& v) { read_option(r, opt->section, *opt, v, c.train); };
  keys["execution"]["parallel"] = [&](const toml::value& v) {
    c.parallel = r.bounded(v, "execution", "parallel", ranges::parallel);
  };
  keys["execution"]["threads_per_job"] = [&](const toml::value& v) {
    c.threads_per_job = r.bounded(v, "execution", "threads_per_job", ranges::threads);
  };
  keys["trace"]["split"] = [&](const toml::value& v) { c.split = r.str(v, "trace", "split"); };
  keys["trace"]["sequences"] = [&](const toml::value& v) {
    c.trace_sequences = r.bounded(v, "trace", "sequences", IntRange{0, 1 << 30});
  };
  for (const auto& o : audit_option_table())
    keys["audit"][o.key] = [&, opt = &o](const toml::value& v) { read_option(r, "audit", *opt, v, c.audit); };

  if (!root.is_table()) throw_input(kFn, "study file '" + path + "' has no top-level table");
  for (const auto& [k, v] : root.as_table()) {
    if (keys.count(k) && k != "") {
      if (!v.is_table()) throw_input(kFn, path + ": '" + k + "' must be a table ([" + k + "])");
      for (const auto& [k2, v2] : v.as_table()) {
        auto it = keys[k].find(k2);
        if (it == keys[k].end()) throw_input(kFn, path + ": unknown key '" + k2 + "' in [" + k + "]");
        it->second(v2);
      }
    } else if (keys[""].count(k)) {
      keys[""][k](v);
    } else {
      throw_input(kFn,
                  path + ": unknown table or key '" + k + "' (tables: data, model, train, execution, trace, audit)");
    }
  }
  try {
    validate_study(c);
  } catch (const InputError& e) {
    throw_input(kFn, path + ": " + e.what());
  }
  return c;
}

void validate_study(const StudyConfig& c) {
  auto need = [](bool ok, const std::string& key, const std::string& rule) {
    if (!ok) throw_input(kFn, key + " " + rule);
  };
  // The study-only keys' ranges (core/limits.hpp); the training and audit keys are checked by their
  // option tables below. A study fails here, before anything runs, rather than in a child process.
  auto in = [&](long long v, const IntRange& r, const std::string& key) {
    need(in_range(r, v), key, "is " + std::to_string(v) + ", but must be in " + range_text(r));
  };
  // The name becomes a directory (runs/NAME): letters, digits, '.', '_' and '-', not starting with
  // '.', so it can never be "..", hidden, or carry a separator, quote or newline.
  need(!c.name.empty() && c.name.size() <= 100 && c.name[0] != '.' &&
           c.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
               std::string::npos,
       "name", "must be 1-100 letters, digits, '.', '_' or '-', not starting with '.'");
  need(!c.datasets.empty(), "[data] datasets", "must name at least one dataset");
  for (const auto& d : c.datasets)
    need(d == "fashion-mnist" || d == "cifar10" || d == "cifar100" || d == "gcide", "[data] datasets",
         "entry '" + d + "' is not fashion-mnist, cifar10, cifar100 or gcide (the text corpus)");
  {
    // A dataset or preset listed twice would put two runs under one name (runs/NAME/DATASET-PRESET-...).
    std::set<std::string> seen_data, seen_models;
    for (const auto& d : c.datasets) need(seen_data.insert(d).second, "[data] datasets", "lists '" + d + "' twice");
    for (const auto& m : c.models) need(seen_models.insert(m).second, "[model] presets", "lists '" + m + "' twice");
  }
  need(!c.models.empty(), "[model] presets", "must name at least one preset");
  for (const auto& m : c.models) {
    const auto& known = model_presets();
    need(std::find(known.begin(), known.end(), m) != known.end() || is_lm_preset(m), "[model] presets",
         "entry '" + m + "' is not a known preset (ar-vit-tiny, ar-deit-small, ar-swin-tiny; ar-lm-tiny for gcide)");
    for (const auto& d : c.datasets)
      need((d == "gcide") == is_lm_preset(m), "[model] presets",
           "pairs '" + m + "' with dataset '" + d +
               "': the language model ar-lm-tiny trains on gcide, the image presets on images");
  }
  need(!c.residuals.empty() || c.standard_twin, "[model] residuals",
       "is empty and standard_twin is false: nothing to train");
  std::set<std::string> seen;
  for (const auto& m : c.residuals) {
    need(m == "full" || m == "block", "[model] residuals",
         "entry '" + m + "' is not full or block (the standard twin is standard_twin = true)");
    need(seen.insert(m).second, "[model] residuals", "lists '" + m + "' twice");
  }
  need(!c.seeds.empty(), "[train] seeds", "must list at least one seed");
  std::set<std::uint64_t> ss(c.seeds.begin(), c.seeds.end());
  need(ss.size() == c.seeds.size(), "[train] seeds", "has a repeated seed");
  in(c.parallel, ranges::parallel, "[execution] parallel");
  in(c.threads_per_job, ranges::threads, "[execution] threads_per_job");
  need(c.split == "test" || c.split == "val", "[trace] split", "must be test or val");
  need(c.trace_sequences >= 0 && c.trace_sequences <= (std::int64_t{1} << 30), "[trace] sequences",
       "must be in [0, 2^30]");
  {
    // The shared training options, by their study keys (the per-run ones are set in expand_study).
    TrainConfig t = c.train;
    t.model = c.models.empty() ? t.model : c.models.front();
    check_options(train_option_table(), t, kFn + std::string(": [data]/[model]/[train]"), true);
  }
  validate_audit_options(c.audit, kFn + std::string(": [audit]"), true);
  need(!c.residuals.empty(), "[model] residuals", "must name at least one AttnRes mode (the audit needs routing)");
}

std::string study_to_toml(const StudyConfig& c) {
  std::ostringstream o;
  o << "# arcal study (resolved). Every key is optional; omitted keys take these defaults.\n";
  o << "name = " << toml_string(c.name) << "\n\n";
  o << "[data]\n";
  o << "datasets = " << list(c.datasets, true) << "   # fashion-mnist | cifar10 | cifar100 | gcide (text)\n";
  for (const auto& opt : train_option_table())
    if (opt.section == "data") o << option_line(opt, c.train);
  o << "\n";
  o << "[model]\n";
  o << "presets = " << list(c.models, true) << "\n";
  o << "residuals = " << list(c.residuals, true) << "   # AttnRes modes, audited: full | block\n";
  o << "standard_twin = " << (c.standard_twin ? "true" : "false") << "   # a standard-residual twin per seed\n";
  for (const auto& opt : train_option_table())
    if (opt.section == "model") o << option_line(opt, c.train);
  o << "\n";
  o << "[train]\n";
  o << "seeds = " << list(c.seeds, false) << "\n";
  for (const auto& opt : train_option_table())
    if (opt.section == "train") o << option_line(opt, c.train);
  o << "\n";
  o << "[execution]\n";
  o << "parallel = " << c.parallel << "   # trainings and traces at once\n";
  o << "threads_per_job = " << c.threads_per_job << "\n\n";
  o << "[trace]\n";
  o << "split = " << toml_string(c.split) << "\n";
  o << "sequences = " << c.trace_sequences << "   # language models: evenly spaced sequences traced (0 = all)\n\n";
  o << "[audit]\n";
  for (const auto& opt : audit_option_table()) o << option_line(opt, c.audit);
  return o.str();
}

std::vector<StudyRun> expand_study(const StudyConfig& c) {
  validate_study(c);
  std::vector<std::string> modes = c.residuals;
  if (c.standard_twin) modes.push_back("standard");
  std::vector<StudyRun> out;
  for (const auto& d : c.datasets)
    for (const auto& m : c.models)
      for (const auto& mode : modes)
        for (auto seed : c.seeds) {
          StudyRun r;
          r.dataset = d;
          r.model = m;
          r.residual = mode;
          r.seed = seed;
          r.audited = mode != "standard";
          r.id = d + "-" + m + "-" + mode + "-s" + std::to_string(seed);
          r.config = c.train;
          r.config.dataset = d;
          r.config.model = m;
          r.config.residual = mode;
          r.config.seed = seed;
          r.config.threads = c.threads_per_job;
          r.config.precision = resolve_precision(r.config.precision, r.config.device);  // the hash sees bf16 | fp32
          r.hash = options_hash(train_option_table(), r.config);
          out.push_back(std::move(r));
        }
  return out;
}

std::string study_audit_hash(const StudyConfig& c) { return options_hash(audit_option_table(), c.audit); }

}  // namespace arcal
