// What arcal may touch on disk, as one rule (docs/hostile_input.md "Links and ownership"):
// - it opens its own files without following a symbolic link (open_own_file: O_NOFOLLOW), and never
//   truncates or appends to a file with a second hard link, so a link planted at DIR/.lock, at a log or
//   at a temporary's name cannot make it write into the file the link points to;
// - it removes or replaces only entries it can prove it made: a temporary directory carries arcal's
//   marker naming the process that made it (pid and start time, process_tag) and its name ends in that
//   tag; it is removed as stale only when both agree and that process no longer runs. A user's
//   `report.old-2024` or `DIR/.tmp-notes` matches neither and is never touched.
#pragma once

#include <string>

namespace arcal {

/// "PID-START": this process's pid and its start time in clock ticks since boot (/proc/self/stat,
/// field 22). Together they name one process for the life of the machine (a pid alone is reused).
const std::string& process_tag();

/// True when the process named by `tag` ("PID-START") is running: /proc/PID exists and started at
/// START. A malformed tag counts as running (never removed).
bool tag_alive(const std::string& tag);

/// The tag at the end of `name` after `prefix` ("report.tmp-" + "123-456" -> "123-456"); "" when
/// the rest is not PID-START.
std::string tag_after(const std::string& name, const std::string& prefix);

/// Opens `path` for writing (flags: O_WRONLY or O_RDWR with O_CREAT, O_TRUNC, O_APPEND, O_EXCL as
/// needed; O_NOFOLLOW and O_CLOEXEC are added) and returns the descriptor. Throws InputError naming
/// `what`, the path and the rule when the path is a symbolic link, not a regular file, or a regular
/// file with more than one hard link (writing it would change the other name's content too); other
/// failures as throw_write_error.
int open_own_file(const std::string& what, const std::string& path, int flags, unsigned mode = 0644);

/// Writes all of `data` to the open descriptor (retrying short writes and EINTR); 0 when done, else
/// the errno of the failed write (EIO for a write that wrote nothing). The caller closes fd.
int write_all(int fd, const std::string& data);

/// Creates `path` (which must not exist: O_EXCL, never through a link) holding `text`; a failed write
/// removes it and throws as throw_write_error (a full disk exit 1, a path the user can fix exit 2).
void write_own_new_file(const std::string& what, const std::string& path, const std::string& text);

/// Creates directory `path` (it must not exist) holding arcal's marker (.arcal-output) that names
/// `what` and this process's tag. Throws as throw_write_error on failure (leaving no directory).
void make_owned_dir(const std::string& path, const std::string& what);

/// True when `path` is a directory (not a link) whose name ends in "PREFIX" + a tag, holding arcal's
/// marker that names the same tag, and that process no longer runs: a temporary of a dead arcal.
bool stale_owned_dir(const std::string& path, const std::string& prefix);

}  // namespace arcal
