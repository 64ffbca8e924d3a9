#include "core/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/error.hpp"
#include "core/ownership.hpp"

namespace arcal {

namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

std::string read_all(int fd) {
  std::string s;
  char buf[512];
  if (::lseek(fd, 0, SEEK_SET) < 0) return s;
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && s.size() < 4096;) s.append(buf, std::size_t(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& what) : path_(dir + "/.lock") {
  // Never through a link, never into a file with a second name (a link planted at DIR/.lock used to
  // have its target truncated): core/ownership.hpp.
  fd_ = open_own_file(dir + ": the lock file", path_, O_RDWR | O_CREAT);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string holder = read_all(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      throw InputError(dir + " is in use by another arcal process (" + (holder.empty() ? "holder unknown" : holder) +
                       "); wait for it to finish or stop it, then run again (lock: " + path_ + ")");
    throw InputError(dir + ": cannot lock " + path_ + ": " + std::strerror(err));
  }
  char when[64];
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", std::gmtime(&now));
  const std::string text =
      "pid " + std::to_string(::getpid()) + " on host " + host_name() + ", " + what + ", since " + when + "\n";
  // The holder line replaces only an empty file or an earlier holder line: a user's own DIR/.lock
  // (a directory taken with --force) keeps its content.
  const std::string before = read_all(fd_);
  if ((before.empty() || before.rfind("pid ", 0) == 0) && ::ftruncate(fd_, 0) == 0) {
    const ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
    wrote_ = true;
    (void)n;  // the content only improves the message of a refused second process
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) {
    if (wrote_) {
      [[maybe_unused]] const int r = ::ftruncate(fd_, 0);  // no stale holder line once released
    }
    ::close(fd_);  // releases the flock
  }
}

}  // namespace arcal
