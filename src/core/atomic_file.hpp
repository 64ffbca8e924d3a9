// Atomic file output: write to a temporary file in the same directory, fsync, then rename over the
// target, so an interrupted process never leaves a file that looks complete.
#pragma once

#include <functional>
#include <string>

namespace arcal {

/// Writes `content` to `path` atomically. Throws InputError naming the path on failure.
void write_file_atomic(const std::string& path, const std::string& content);

/// Calls `writer(tmp_path)` to produce the file, then renames tmp_path over `path`.
/// If the writer throws, the temporary file is removed and the exception propagates.
void write_atomic_with(const std::string& path, const std::function<void(const std::string&)>& writer);

/// Reads a whole file; throws InputError naming the path if it cannot be opened.
std::string read_file(const std::string& path);

}  // namespace arcal
