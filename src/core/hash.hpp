// The project's one content hash: FNV-1a 64 of a text as 16 hex digits, stable across platforms and
// builds. Run identities (core/options.hpp options_hash), study and audit directories (arcal run) and
// the model configuration hash (model/config.hpp) all use it.
#pragma once

#include <string>

namespace arcal {

/// FNV-1a 64 of text as 16 hex digits.
std::string stable_hash(const std::string& text);

}  // namespace arcal
