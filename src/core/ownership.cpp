#include "core/ownership.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/paths.hpp"

namespace arcal {

namespace {

/// Field 22 (starttime) of /proc/PID/stat; "" when the process does not exist.
std::string start_time_of(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/stat");
  if (!in) return "";
  std::string line;
  std::getline(in, line);
  const std::size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return "";
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
    if (i == 22) return field;
  }
  return "";
}

bool is_digits(const std::string& s) {
  return !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
}

std::string marker_text(const std::string& what) {
  return "made by " + what + " (process " + process_tag() +
         "); arcal replaces files in this directory (docs/interface.md)\n";
}

}  // namespace

const std::string& process_tag() {
  static const std::string tag = [] {
    const std::string pid = std::to_string(::getpid());
    const std::string start = start_time_of("self");
    return pid + "-" + (start.empty() ? "0" : start);
  }();
  return tag;
}

bool tag_alive(const std::string& tag) {
  const std::size_t dash = tag.find('-');
  if (dash == std::string::npos) return true;
  const std::string pid = tag.substr(0, dash), start = tag.substr(dash + 1);
  if (!is_digits(pid) || !is_digits(start)) return true;
  const std::string now = start_time_of(pid);
  return !now.empty() && now == start;
}

std::string tag_after(const std::string& name, const std::string& prefix) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return "";
  const std::string tag = name.substr(prefix.size());
  const std::size_t dash = tag.find('-');
  if (dash == std::string::npos || !is_digits(tag.substr(0, dash)) || !is_digits(tag.substr(dash + 1))) return "";
  return tag;
}

int open_own_file(const std::string& what, const std::string& path, int flags, unsigned mode) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    const int err = errno;
    struct stat ls {};
    const bool is_link = ::lstat(path.c_str(), &ls) == 0 && S_ISLNK(ls.st_mode);
    if (err == ELOOP || (err == EEXIST && is_link))  // O_EXCL reports a link (even a dangling one) as EEXIST
      throw InputError(what + ": " + path +
                       " is a symbolic link; arcal never writes through a link (it would change "
                       "the file the link points to): remove the link or choose another path");
    if (err == EEXIST) throw InputError(what + ": " + path + " already exists, and arcal creates it only new");
    throw_write_error(what, path, err);  // a full disk is exit 1, a path the user can fix exit 2
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink > 1) {
    const bool linked = S_ISREG(st.st_mode) && st.st_nlink > 1;
    ::close(fd);
    throw InputError(what + ": " + path +
                     (linked ? " has another hard link (" + std::to_string(st.st_nlink) +
                                   " names); arcal never writes into a file shared with another name: remove this name"
                             : std::string(" is not a regular file")));
  }
  return fd;
}

int write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? errno : EIO;
    done += static_cast<std::size_t>(n);
  }
  return 0;
}

void write_own_new_file(const std::string& what, const std::string& path, const std::string& text) {
  const int fd = open_own_file(what, path, O_WRONLY | O_CREAT | O_EXCL);
  if (const int err = write_all(fd, text); err != 0) {
    ::close(fd);
    ::unlink(path.c_str());
    throw_write_error(what, path, err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    throw_write_error(what, path, err);
  }
}

void make_owned_dir(const std::string& path, const std::string& what) {
  if (::mkdir(path.c_str(), 0755) != 0) throw_write_error(what, path, errno);
  const std::string marker = path + "/" + kOutputMarker;
  const std::string text = marker_text(what);
  try {
    write_own_new_file(what, marker, text);
  } catch (...) {
    ::rmdir(path.c_str());  // this process made it a moment ago, and it holds nothing now
    throw;
  }
}

bool stale_owned_dir(const std::string& path, const std::string& prefix) {
  const std::size_t slash = path.rfind('/');
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string tag = tag_after(name, prefix);
  if (tag.empty()) return false;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  const std::string marker = path + "/" + kOutputMarker;
  if (::lstat(marker.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 4096) return false;
  std::ifstream in(marker);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.find("(process " + tag + ")") == std::string::npos) return false;
  return !tag_alive(tag);
}

}  // namespace arcal
