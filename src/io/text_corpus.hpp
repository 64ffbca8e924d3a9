// The language model's text corpus (issue 27): a dictd dictionary (Debian's dict-gcide, the GNU
// Collaborative International Dictionary of English: about 40 MB of English prose in 200,000 entries,
// installed by scripts/setup.sh) read as documents, a seeded split by document (never by position
// inside one) into train / validation / test, and the packing of a split into byte-level token
// sequences (K = 256, one token per byte) for next-token training. Standard library and zlib only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace arcal {

/// Debian's dict-gcide files.
inline constexpr const char* kGcideDict = "/usr/share/dictd/gcide.dict.dz";
inline constexpr const char* kGcideIndex = "/usr/share/dictd/gcide.index";

struct TextCorpus {
  std::string source;                  ///< where it was read from (for logs and results)
  std::vector<std::string> documents;  ///< one per dictionary entry, in the order of the text
};

/// dictd's base-64 numbers (index offsets and lengths): digits A-Z a-z 0-9 + / worth 0..63, most
/// significant first. Throws InputError naming `where` for an empty string, another character, or a
/// value above 2^40.
std::uint64_t dictd_number(const std::string& digits, const std::string& where);

/// Reads a dictd dictionary: `index_path` (lines "headword TAB offset TAB length") and `dict_path`
/// (the text, gzip/dictzip or plain). Every distinct (offset, length) span is one document (several
/// headwords may share an entry); dictd's "00-database-*" header entries are left out. Throws
/// InputError naming the file and line for a missing or unreadable file, a malformed line, or a span
/// outside the text.
TextCorpus read_dictd_corpus(const std::string& dict_path = kGcideDict, const std::string& index_path = kGcideIndex);

/// Document indices of each split: a seeded shuffle of 0..n-1, the first round(n * test_fraction)
/// to test, the next round(n * val_fraction) to validation, the rest to train; each list sorted.
struct DocumentSplit {
  std::vector<std::size_t> train, validation, test;
};
DocumentSplit split_documents(std::size_t n, double val_fraction, double test_fraction, std::uint64_t seed);

/// A split's documents packed for next-token training: the documents in order, each followed by one
/// separator byte '\n' (so a boundary is a blank line), cut into `count` sequences of `length`
/// tokens (the remainder dropped).
/// sequence s is tokens[s * length .. (s+1) * length); document_of[s] is the document its first token
/// comes from (a sequence may run into the next document).
struct TokenSequences {
  std::int64_t count = 0, length = 0;
  std::vector<std::uint8_t> tokens;      ///< count * length bytes
  std::vector<std::size_t> document_of;  ///< [count]
};
TokenSequences pack_sequences(const TextCorpus& corpus, const std::vector<std::size_t>& documents, int length);

}  // namespace arcal
