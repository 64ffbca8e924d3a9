#include "core/paths.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/ownership.hpp"

namespace arcal {

namespace fs = std::filesystem;

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool same_path(const std::string& a, const std::string& b) {
  if (same_file(a, b)) return true;
  std::error_code ec1, ec2;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec1), ec1);
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, ec2), ec2);
  return !ec1 && !ec2 && ca == cb;
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i)
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      const auto& [fa, a] = outputs[i];
      const auto& [fb, b] = outputs[j];
      if (a.empty() || b.empty()) continue;
      if (same_path(a, b))
        throw InputError(fb + ": " + b + " is the same path as " + fa + " " + a +
                         " (compared as resolved paths); give each output its own path");
    }
}

bool path_within(const std::string& path, const std::string& dir) {
  std::error_code ec1, ec2;
  const fs::path p = fs::weakly_canonical(fs::absolute(path), ec1);
  const fs::path d = fs::weakly_canonical(fs::absolute(dir), ec2);
  if (ec1 || ec2) return false;
  auto pi = p.begin(), di = d.begin();
  for (; di != d.end(); ++di, ++pi) {
    if (di->empty()) continue;  // a trailing separator
    if (pi == p.end() || *pi != *di) return false;
  }
  return true;
}

void check_output_not_input(const std::string& flag, const std::string& out, const std::vector<std::string>& inputs) {
  for (const auto& in : inputs)
    if (same_file(out, in))
      throw InputError(flag + ": " + out + " is the input " + in +
                       "; writing it would destroy the input. Choose another output file");
}

void check_output_file(const std::string& flag, const std::string& out, bool force) {
  if (out.empty()) throw InputError(flag + ": the output path is empty");
  std::error_code ec;
  const auto st = fs::status(out, ec);
  if (fs::is_directory(st)) throw InputError(flag + ": " + out + " is a directory, but must be a file path");
  if (fs::exists(st) && !force)
    throw InputError(flag + ": " + out +
                     " already exists; pass --force to replace it (the new file replaces it "
                     "atomically once complete) or choose another path");
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%") ==
                        std::string::npos)
    return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool has_output_marker(const std::string& dir) {
  std::error_code ec;
  // A link named like the marker is not the marker (a dangling one used to make arcal create a file
  // where it pointed).
  return fs::is_regular_file(fs::symlink_status(fs::path(dir) / kOutputMarker, ec));
}

std::string foreign_entry(const std::string& dir, const std::vector<std::string>& own) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());  // the message names the same entry every time
  for (const auto& n : names) {
    // The marker and the lock count as arcal's only as regular files; a link by either name is the user's.
    const bool regular = fs::is_regular_file(fs::symlink_status(fs::path(dir) / n, ec));
    if ((n == kOutputMarker || n == ".lock") && regular) continue;
    if (std::find(own.begin(), own.end(), n) == own.end()) return n;
  }
  return "";
}

void check_output_dir(const std::string& flag, const std::string& dir, const std::string& command, bool force,
                      const std::string& force_flag, const std::vector<std::string>& legacy_names) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  if (!fs::is_directory(dir, ec)) throw InputError(flag + ": " + dir + " exists and is not a directory");
  if (force || has_output_marker(dir)) return;
  const std::string other = foreign_entry(dir, {});
  if (other.empty()) return;  // empty, or only a lock file
  if (other == kOutputMarker || other == ".lock")
    throw InputError(flag + ": " + dir + "/" + other +
                     " is a symbolic link or not a regular file, so it is not arcal's " +
                     (other == ".lock" ? "lock" : "marker") +
                     "; arcal never follows a link by that name (it could write where the link points): remove it, or "
                     "choose another directory");
  // An output of an arcal made before the marker: every entry is one of the command's own names.
  if (!legacy_names.empty() && foreign_entry(dir, legacy_names).empty()) return;
  throw InputError(flag + ": " + dir + " holds " + other + " and was not made by " + command + " (no " + kOutputMarker +
                   "); arcal writes only into directories it made, so choose a new or empty directory" +
                   (force_flag.empty() ? std::string() : " or pass " + force_flag + " to use it anyway"));
}

void mark_output_dir(const std::string& dir, const std::string& command) {
  const std::string path = (fs::path(dir) / kOutputMarker).string();
  if (has_output_marker(dir)) return;
  // O_EXCL with O_NOFOLLOW: a link by the marker's name (dangling or not) is refused, never followed.
  write_own_new_file(command, path,
                     "made by " + command + " (process " + process_tag() +
                         "); arcal replaces files in this directory (docs/interface.md)\n");
}

bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = p[i];
    std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    unsigned cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

void check_utf8_path(const std::string& flag, const std::string& path) {
  if (valid_utf8(path)) return;
  std::string shown;
  for (unsigned char c : path) {
    if (c >= 0x20 && c < 0x7F)
      shown += static_cast<char>(c);
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      shown += buf;
    }
  }
  throw InputError(flag + ": " + shown +
                   " is not valid UTF-8; arcal records paths in JSON (results.json, "
                   "config.json), so rename it or pass it through a link with a UTF-8 name");
}

}  // namespace arcal
