// Output paths that never destroy inputs: an output is compared with every input by device and inode
// (so ./x, x, a symlink or a hard link to x are all x), an existing output file is replaced only
// with --force (and then atomically, by the writers in atomic_file.hpp), and a path is quoted for a
// shell when a message tells the user a command to run.
#pragma once

#include <string>
#include <vector>

namespace arcal {

/// True when both paths exist and are the same file (st_dev and st_ino, following symlinks).
bool same_file(const std::string& a, const std::string& b);

/// True when `path` is `dir` or lies below it (after resolving symlinks and "..").
bool path_within(const std::string& path, const std::string& dir);

/// Throws InputError "FLAG: OUT is the input INPUT; ..." when out is the same file as any input.
void check_output_not_input(const std::string& flag, const std::string& out, const std::vector<std::string>& inputs);

/// An output file about to be written: refuses a directory, and an existing file unless `force`
/// (the message names the file and --force). Empty `out` is refused too.
void check_output_file(const std::string& flag, const std::string& out, bool force);

/// `s` quoted for a POSIX shell when it needs quoting ("runs/a b" -> 'runs/a b'), for messages
/// that print a command to run. Never passed to a shell by arcal itself.
std::string shell_quote(const std::string& s);

}  // namespace arcal
