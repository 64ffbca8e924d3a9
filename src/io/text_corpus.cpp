#include "io/text_corpus.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "core/check.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"
#include "core/rng.hpp"
#include "io/image_data.hpp"

namespace arcal {

namespace {

constexpr const char* kFn = "text corpus";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw_input(kFn,
                path + ": cannot open (missing file? Debian's dict-gcide provides it; scripts/setup.sh installs it)");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw_input(kFn, path + ": read error");
  return s.str();
}

int b64_digit(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+') return 62;
  if (ch == '/') return 63;
  return -1;
}

}  // namespace

std::uint64_t dictd_number(const std::string& digits, const std::string& where) {
  if (digits.empty()) throw_input(kFn, where + ": empty base-64 number");
  std::uint64_t v = 0;
  for (char ch : digits) {
    const int d = b64_digit(ch);
    if (d < 0) throw_input(kFn, where + ": '" + digits + "' is not a dictd base-64 number (character '" + ch + "')");
    v = v * 64 + static_cast<std::uint64_t>(d);
    if (v > (std::uint64_t(1) << 40)) throw_input(kFn, where + ": base-64 number '" + digits + "' is above 2^40");
  }
  return v;
}

TextCorpus read_dictd_corpus(const std::string& dict_path, const std::string& index_path) {
  const std::string index = read_file(index_path);
  const std::string text = gunzip_capped(read_file(dict_path), dict_path, input_limits().max_array_bytes);
  std::map<std::pair<std::uint64_t, std::uint64_t>, bool> spans;  // (offset, length), ordered by offset
  std::istringstream lines(index);
  std::string line;
  std::size_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    const std::string where = index_path + ": line " + std::to_string(number);
    const auto t1 = line.find('\t');
    const auto t2 = t1 == std::string::npos ? std::string::npos : line.find('\t', t1 + 1);
    if (t2 == std::string::npos) throw_input(kFn, where + ": expected 'headword TAB offset TAB length'");
    const std::string head = line.substr(0, t1);
    if (head.rfind("00-database", 0) == 0) continue;  // dictd's own header entries
    const auto t3 = line.find('\t', t2 + 1);          // dictd allows a fourth field (original headword)
    const auto offset = dictd_number(line.substr(t1 + 1, t2 - t1 - 1), where + " (offset)");
    const auto length = dictd_number(line.substr(t2 + 1, t3 == std::string::npos ? std::string::npos : t3 - t2 - 1),
                                     where + " (length)");
    if (offset + length > text.size())
      throw_input(kFn, where + " ('" + head + "'): bytes " + std::to_string(offset) + ".." +
                           std::to_string(offset + length) + " lie outside the " + std::to_string(text.size()) +
                           "-byte text of " + dict_path + " (truncated file, or index and text of different versions)");
    if (length > 0) spans[{offset, length}] = true;
  }
  if (spans.empty()) throw_input(kFn, index_path + ": no entries");
  TextCorpus c;
  c.source = "dictd: " + dict_path + " (index " + index_path + ")";
  c.documents.reserve(spans.size());
  for (const auto& [span, unused] : spans) c.documents.push_back(text.substr(span.first, span.second));
  return c;
}

DocumentSplit split_documents(std::size_t n, double val_fraction, double test_fraction, std::uint64_t seed) {
  if (!(val_fraction >= 0 && test_fraction >= 0 && val_fraction + test_fraction < 1))
    throw_input(kFn, "validation and test fractions must be >= 0 with a sum below 1");
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(derive_seed(seed, 0x7E47));
  rng.shuffle(order);
  const auto n_test = static_cast<std::size_t>(std::llround(double(n) * test_fraction));
  const auto n_val = static_cast<std::size_t>(std::llround(double(n) * val_fraction));
  DocumentSplit s;
  s.test.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_test));
  s.validation.assign(order.begin() + static_cast<std::ptrdiff_t>(n_test),
                      order.begin() + static_cast<std::ptrdiff_t>(n_test + n_val));
  s.train.assign(order.begin() + static_cast<std::ptrdiff_t>(n_test + n_val), order.end());
  for (auto* v : {&s.train, &s.validation, &s.test}) std::sort(v->begin(), v->end());
  return s;
}

TokenSequences pack_sequences(const TextCorpus& corpus, const std::vector<std::size_t>& documents, int length) {
  if (length < 2) throw_input(kFn, "sequence length must be >= 2 (got " + std::to_string(length) + ")");
  std::vector<std::uint8_t> stream;
  std::vector<std::size_t> doc_at;  // document of every byte
  for (std::size_t i = 0; i < documents.size(); ++i) {
    const std::size_t d = documents[i];
    if (d >= corpus.documents.size())
      throw_index(kFn, "documents", i, std::to_string(d),
                  "a document index below " + std::to_string(corpus.documents.size()));
    const auto& t = corpus.documents[d];
    stream.insert(stream.end(), t.begin(), t.end());
    stream.push_back('\n');
    doc_at.insert(doc_at.end(), t.size() + 1, d);
  }
  TokenSequences s;
  s.length = length;
  s.count = static_cast<std::int64_t>(stream.size() / static_cast<std::size_t>(length));
  s.tokens.assign(stream.begin(), stream.begin() + s.count * length);
  s.document_of.resize(static_cast<std::size_t>(s.count));
  for (std::int64_t i = 0; i < s.count; ++i)
    s.document_of[static_cast<std::size_t>(i)] = doc_at[static_cast<std::size_t>(i * length)];
  return s;
}

}  // namespace arcal
