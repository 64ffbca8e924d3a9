#include "core/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/error.hpp"
#include "core/ownership.hpp"

namespace arcal {

namespace {

constexpr std::size_t kNameMax = 255;  // bytes of one path component (NAME_MAX of Linux file systems)
constexpr std::size_t kTagChars = 31;  // process_tag(): PID (<= 10 digits) '-' START (<= 20 digits)

struct TempName {
  std::string dir;     ///< "" or "DIR/"
  std::string prefix;  ///< the temporary's name up to the pid: "NAME.tmp."
};

/// NAME.tmp.TAG (TAG = process_tag(), PID-START) beside the target, NAME shortened so that the whole name fits in 255
/// bytes (a legal 250-byte file name used to be refused because its temporary's name was too long).
TempName temp_name_parts(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  TempName t;
  t.dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::size_t room = kNameMax - (sizeof ".tmp." - 1) - kTagChars - 7;  // 7: libzip's ".XXXXXX"
  if (base.size() > room) base.resize(room);
  t.prefix = base + ".tmp.";
  return t;
}

std::string temp_name(const std::string& path) {
  const TempName t = temp_name_parts(path);
  return t.dir + t.prefix + process_tag();
}

/// Removes the temporaries of `path` left by processes that no longer exist (a kill -9 between
/// writing and renaming; libzip's own NAME.tmp.TAG.XXXXXX inside write_npz): NAME.tmp.PID-START[.*]
/// whose process (that pid, started at that time) no longer runs, and only regular files. A user's
/// NAME.tmp.2024 or NAME.tmp.old is not a name arcal makes and is never touched, nor is another live
/// writer's temporary (core/ownership.hpp).
void remove_stale_temporaries(const std::string& path) {
  const TempName t = temp_name_parts(path);
  DIR* d = ::opendir(t.dir.empty() ? "." : t.dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, t.prefix.size(), t.prefix) != 0) continue;
    const std::size_t dot = name.find('.', t.prefix.size());
    const std::string tag = tag_after(name.substr(0, dot), t.prefix);
    if (tag.empty() || tag == process_tag() || tag_alive(tag)) continue;
    if (dot != std::string::npos && name.size() - dot != 7) continue;  // only libzip's ".XXXXXX"
    struct stat st {};
    const std::string full = t.dir + name;
    if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    ::unlink(full.c_str());
  }
  ::closedir(d);
}

/// The directory of `path` as stat() takes it: "." for a bare name, "/" for a file at the root.
std::string parent_dir(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

const char* errno_name(int err) {
  switch (err) {
    case ENOSPC: return "ENOSPC";
    case EDQUOT: return "EDQUOT";
    case EIO: return "EIO";
    case EFBIG: return "EFBIG";
    case EROFS: return "EROFS";
    case EACCES: return "EACCES";
    case ENOENT: return "ENOENT";
    case ENOTDIR: return "ENOTDIR";
    case EISDIR: return "EISDIR";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOMEM: return "ENOMEM";
    default: return "errno";
  }
}

void throw_write_error(const std::string& fn, const std::string& path, int err) {
  const std::string why = std::string(std::strerror(err)) + " (" + errno_name(err) + ")";
  // The user can fix a path (exit 2: a missing directory too, since arcal cannot tell one never made
  // from one removed while it worked); a full disk, a quota or an I/O error are failures of the
  // environment while working (exit 1, docs/interface.md).
  if (err == ENOENT) {
    const std::string dir = parent_dir(path);
    struct stat sb {};
    if (::stat(dir.c_str(), &sb) != 0)
      throw InputError(fn + ": cannot write " + path + ": the directory " + dir +
                       " does not exist (was it removed while arcal was working?)");
  }
  if (err == EACCES || err == ENOTDIR || err == EISDIR || err == ENAMETOOLONG || err == ENOENT)
    throw InputError(fn + ": cannot write " + path + ": " + why);
  throw std::runtime_error(fn + ": cannot write " + path + ": " + why);
}

void write_atomic_with(const std::string& path, const std::function<void(const std::string&)>& writer) {
  remove_stale_temporaries(path);
  const std::string tmp = temp_name(path);
  // The name carries this process's tag, so whatever is there (a link planted at the predicted name)
  // is not a user's file: removed (the link itself, never its target) before the writer creates it.
  struct stat pre {};
  if (::lstat(tmp.c_str(), &pre) == 0) ::unlink(tmp.c_str());
  try {
    writer(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  fsync_path(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    // ENOENT with the directory still there: the temporary was deleted after it was written, as
    // `rm -r DIR` does file by file before it removes DIR itself.
    struct stat sb {};
    const bool tmp_vanished = err == ENOENT && ::stat(tmp.c_str(), &sb) != 0;
    std::remove(tmp.c_str());
    if (tmp_vanished)
      throw InputError("write_file_atomic: cannot write " + path + ": its temporary was deleted from " +
                       parent_dir(path) +
                       " before the rename; the directory is being emptied or does not exist (was it removed "
                       "while arcal was working?)");
    throw_write_error("write_file_atomic", path, err);
  }
}

void write_file_atomic(const std::string& path, const std::string& content) {
  write_atomic_with(path, [&](const std::string& tmp) {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) throw_write_error("write_file_atomic", path, errno);
    if (const int err = write_all(fd, content); err != 0) {
      ::close(fd);
      throw_write_error("write_file_atomic", path, err);
    }
    // A full disk can show only here (delayed allocation): check fsync and close too.
    if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
      const int err = errno;
      ::close(fd);
      throw_write_error("write_file_atomic", path, err);
    }
    if (::close(fd) != 0) throw_write_error("write_file_atomic", path, errno);
  });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("read_file: cannot open " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace arcal
