// The language model's corpus (io/text_corpus.hpp): dictd base-64 numbers against hand-decoded
// values, a small dictd dictionary written here (gzip through zlib, and plain) read back exactly with
// shared spans and header entries left out, the errors for malformed, out-of-range and truncated
// files, the seeded split by document, the packing into sequences, and (when Debian's dict-gcide is
// installed) the real corpus.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.hpp"
#include "io/text_corpus.hpp"

using namespace arcal;
namespace fs = std::filesystem;

namespace {

std::string b64(std::uint64_t v) {  // dictd's positional base 64, written independently of the reader
  const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string s;
  do {
    s.insert(s.begin(), digits[v % 64]);
    v /= 64;
  } while (v > 0);
  return s;
}

struct Dict {
  std::string text, index;
};

// Three entries, one of them under two headwords, plus a dictd header entry.
Dict sample() {
  const std::string header = "00-database-info\nsample\n", a = "apple\n   A fruit.\n", b = "bear\n   An animal.\n",
                    c = "cat\n   Another animal.\n";
  Dict d;
  d.text = header + a + b + c;
  auto line = [&](const std::string& head, std::size_t off, std::size_t len) {
    d.index += head + "\t" + b64(off) + "\t" + b64(len) + "\n";
  };
  line("00-database-info", 0, header.size());
  line("apple", header.size(), a.size());
  line("bear", header.size() + a.size(), b.size());
  line("Bruin", header.size() + a.size(), b.size());  // the same entry under a second headword
  line("cat", header.size() + a.size() + b.size(), c.size());
  return d;
}

std::string write(const std::string& name, const std::string& bytes) {
  const auto path = (fs::temp_directory_path() / ("arcal_corpus_" + name)).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string write_gz(const std::string& name, const std::string& bytes) {
  const auto path = (fs::temp_directory_path() / ("arcal_corpus_" + name)).string();
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
  return path;
}

std::string error_of(const std::string& dict, const std::string& index) {
  try {
    read_dictd_corpus(dict, index);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TextCorpus, DictdNumbersDecodeAsBase64Digits) {
  EXPECT_EQ(dictd_number("A", "t"), 0u);
  EXPECT_EQ(dictd_number("/", "t"), 63u);
  EXPECT_EQ(dictd_number("BA", "t"), 64u);
  EXPECT_EQ(dictd_number("5I", "t"), 57u * 64 + 8);  // gcide.index's first entry offset
  EXPECT_EQ(dictd_number(b64(123456789), "t"), 123456789u);
  EXPECT_THROW(dictd_number("", "t"), InputError);
  EXPECT_THROW(dictd_number("A-B", "t"), InputError);
  EXPECT_THROW(dictd_number("////////", "t"), InputError);  // 2^48 - 1 > 2^40
}

TEST(TextCorpus, ReadsEntriesOnceEachWithoutDictdHeaders) {
  const Dict d = sample();
  const auto index = write("s.index", d.index);
  for (bool gz : {true, false}) {
    const auto dict = gz ? write_gz("s.dict.dz", d.text) : write("s.dict", d.text);
    const TextCorpus c = read_dictd_corpus(dict, index);
    ASSERT_EQ(c.documents.size(), 3u) << gz;
    EXPECT_EQ(c.documents[0], "apple\n   A fruit.\n");
    EXPECT_EQ(c.documents[1], "bear\n   An animal.\n");
    EXPECT_EQ(c.documents[2], "cat\n   Another animal.\n");
  }
}

TEST(TextCorpus, BadFilesNameTheFileLineAndConstraint) {
  const Dict d = sample();
  const auto dict = write_gz("b.dict.dz", d.text), index = write("b.index", d.index);
  EXPECT_NE(error_of("/nonexistent/x.dict.dz", index).find("dict-gcide"), std::string::npos);
  auto msg = error_of(dict, write("b1.index", "apple\tB\n"));
  EXPECT_NE(msg.find("line 1"), std::string::npos) << msg;
  msg = error_of(dict, write("b2.index", d.index + "dog\tB*\tC\n"));
  EXPECT_NE(msg.find("line 6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'*'"), std::string::npos) << msg;
  msg = error_of(dict, write("b3.index", d.index + "zebra\t" + b64(d.text.size() - 2) + "\t" + b64(5) + "\n"));
  EXPECT_NE(msg.find("outside"), std::string::npos) << msg;
  EXPECT_NE(msg.find("zebra"), std::string::npos) << msg;
  // A truncated gzip stream.
  std::ifstream in(dict, std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  msg = error_of(write("b4.dict.dz", gz.substr(0, gz.size() / 2)), index);
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(error_of(dict, write("b5.index", "00-database-info\tA\tB\n")).find("no entries"), std::string::npos);
}

TEST(TextCorpus, SplitIsByDocumentSeededAndDisjoint) {
  const auto s = split_documents(1000, 0.05, 0.1, 7);
  EXPECT_EQ(s.test.size(), 100u);
  EXPECT_EQ(s.validation.size(), 50u);
  EXPECT_EQ(s.train.size(), 850u);
  std::set<std::size_t> all;
  for (const auto* v : {&s.train, &s.validation, &s.test}) {
    EXPECT_TRUE(std::is_sorted(v->begin(), v->end()));
    all.insert(v->begin(), v->end());
  }
  EXPECT_EQ(all.size(), 1000u);  // every document in exactly one split
  const auto again = split_documents(1000, 0.05, 0.1, 7), other = split_documents(1000, 0.05, 0.1, 8);
  EXPECT_EQ(again.test, s.test);
  EXPECT_NE(other.test, s.test);
  EXPECT_THROW(split_documents(10, 0.5, 0.5, 1), InputError);
}

TEST(TextCorpus, PacksDocumentsWithSeparatorsIntoSequences) {
  TextCorpus c;
  c.documents = {"abc", "defgh", "ij"};
  const auto s = pack_sequences(c, {2, 0}, 4);  // "ij\nabc\n" = 7 bytes -> one sequence of 4
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(std::string(s.tokens.begin(), s.tokens.end()), "ij\na");
  EXPECT_EQ(s.document_of, (std::vector<std::size_t>{2}));
  const auto t = pack_sequences(c, {0, 1, 2}, 3);  // "abc\ndefgh\nij\n" = 13 bytes -> 4 sequences
  EXPECT_EQ(t.count, 4);
  EXPECT_EQ(t.document_of, (std::vector<std::size_t>{0, 0, 1, 1}));
  EXPECT_THROW(pack_sequences(c, {3}, 4), InputError);
  EXPECT_THROW(pack_sequences(c, {0}, 1), InputError);
}

TEST(TextCorpus, DebiansGcideReadsAsEnglishEntries) {
  if (!fs::exists(kGcideIndex) || !fs::exists(kGcideDict)) GTEST_SKIP() << "dict-gcide is not installed";
  const TextCorpus c = read_dictd_corpus();
  EXPECT_GT(c.documents.size(), 100000u);
  std::size_t bytes = 0, ascii = 0;
  for (const auto& d : c.documents) {
    bytes += d.size();
    for (unsigned char ch : d) ascii += ch < 128;
  }
  EXPECT_GT(bytes, 20'000'000u);
  EXPECT_GT(double(ascii) / double(bytes), 0.99);
}
