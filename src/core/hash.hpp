// The project's one content hash: FNV-1a 64 of a text as 16 hex digits, stable across platforms and
// builds. Run identities (core/options.hpp options_hash), study and audit directories (arcal run) and
// the model configuration hash (model/config.hpp) and the audit's row and run fingerprints
// (audit/integrity.cpp) all use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace arcal {

/// FNV-1a 64's offset basis: the start of a fresh hash.
inline constexpr std::uint64_t kFnv1aOffset = 14695981039346656037ull;

/// FNV-1a 64 of `bytes` bytes at `data`, continued from `h` (chain calls to hash several buffers).
std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t h = kFnv1aOffset);

/// FNV-1a 64 of text as 16 hex digits.
std::string stable_hash(const std::string& text);

}  // namespace arcal
