// Atomic file output: write to a temporary file in the same directory, fsync, then rename over the
// target, so an interrupted process never leaves a file that looks complete. The temporary is
// NAME.tmp.PID-START (NAME shortened to keep it within 255 bytes; PID-START names the process,
// core/ownership.hpp), created with O_EXCL and never through a link; temporaries of the same target
// left by processes that have died are removed by the next write, and nothing else.
#pragma once

#include <functional>
#include <string>

namespace arcal {

/// Throws for a failed write of `path` with errno `err`, naming fn, the path, the error and its name
/// ("No space left on device (ENOSPC)"): InputError (exit 2) when the path is the user's to fix
/// (permission, not a directory, name too long, a missing directory: "does not exist (was it removed
/// while arcal was working?)"), std::runtime_error (exit 1) for a full disk, a quota or an I/O error.
[[noreturn]] void throw_write_error(const std::string& fn, const std::string& path, int err);
/// "ENOSPC", "EIO", ... ("errno" for others).
const char* errno_name(int err);

/// Writes `content` to `path` atomically. Throws as throw_write_error on failure.
void write_file_atomic(const std::string& path, const std::string& content);

/// Calls `writer(tmp_path)` to produce the file, then renames tmp_path over `path`.
/// If the writer throws, the temporary file is removed and the exception propagates.
void write_atomic_with(const std::string& path, const std::function<void(const std::string&)>& writer);

/// Reads a whole file; throws InputError naming the path if it cannot be opened.
std::string read_file(const std::string& path);

}  // namespace arcal
