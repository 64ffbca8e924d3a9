// Output paths that never destroy inputs: an output is compared with every input by device and inode
// (so ./x, x, a symlink or a hard link to x are all x), an existing output file is replaced only
// with --force (and then atomically, by the writers in atomic_file.hpp), and a path is quoted for a
// shell when a message tells the user a command to run.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace arcal {

/// True when both paths exist and are the same file (st_dev and st_ino, following symlinks).
bool same_file(const std::string& a, const std::string& b);

/// True when a and b name one file: the same inode when both exist, else the same absolute path with
/// links and ".." resolved as far as it exists ("G.npz", "$PWD/G.npz" and "sub/../G.npz" are one).
bool same_path(const std::string& a, const std::string& b);

/// Throws InputError "FLAG2: B is the same path as FLAG1 A ..." when two of the (flag, path) outputs
/// of one command name one file (same_path); empty paths are skipped.
void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs);

/// True when `path` is `dir` or lies below it (after resolving symlinks and "..").
bool path_within(const std::string& path, const std::string& dir);

/// Throws InputError "FLAG: OUT is the input INPUT; ..." when out is the same file as any input.
void check_output_not_input(const std::string& flag, const std::string& out, const std::vector<std::string>& inputs);

/// An output file about to be written: refuses a directory, and an existing file unless `force`
/// (the message names the file and --force). Empty `out` is refused too.
void check_output_file(const std::string& flag, const std::string& out, bool force);

/// The file that makes a directory arcal's: an output directory (report, run directory, study
/// directory, audit directory) is arcal's only if arcal made it, and nothing in a directory that is
/// not arcal's is touched without --force (docs/interface.md "Output directories").
inline constexpr const char* kOutputMarker = ".arcal-output";

/// True when DIR/.arcal-output exists.
bool has_output_marker(const std::string& dir);

/// Whether DIR may be used as the output directory of `command`: it does not exist, is empty (a lock
/// file alone counts as empty), holds the marker, or `legacy` says it is an output of an earlier arcal
/// (made before the marker); with `force` any directory is taken. Otherwise throws InputError naming
/// FLAG, DIR and one of its entries ("holds thesis.tex and was not made by arcal ..."); `force_flag`
/// names the way out ("" when the command has none). Creates nothing.
void check_output_dir(const std::string& flag, const std::string& dir, const std::string& command, bool force,
                      const std::string& force_flag, const std::vector<std::string>& legacy_names = {});

/// Writes DIR/.arcal-output (DIR must exist); the content names the command.
void mark_output_dir(const std::string& dir, const std::string& command);

/// The first entry of DIR whose name is not in `own` (and not the marker or .lock); "" when none.
std::string foreign_entry(const std::string& dir, const std::vector<std::string>& own);

/// True when `s` is valid UTF-8 (results.json and the reports store paths as JSON strings).
bool valid_utf8(const std::string& s);

/// Throws InputError "FLAG: PATH is not valid UTF-8 ..." unless valid_utf8(path): checked before any
/// work, so a path that cannot be written into results.json wastes nothing and leaves nothing.
void check_utf8_path(const std::string& flag, const std::string& path);

/// `s` quoted for a POSIX shell when it needs quoting ("runs/a b" -> 'runs/a b'), for messages
/// that print a command to run. Never passed to a shell by arcal itself.
std::string shell_quote(const std::string& s);

}  // namespace arcal
