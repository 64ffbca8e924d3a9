#include "core/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/error.hpp"

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
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw InputError(dir + ": cannot create the lock file " + path_ + ": " + std::strerror(errno));
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
  const std::string text = "pid " + std::to_string(::getpid()) + " on host " + host_name() + ", " + what + ", since " +
                           when + "\n";
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t n = ::pwrite(fd_, text.data(), text.size(), 0);
    (void)n;  // the content only improves the message of a refused second process
  }
}

DirLock::~DirLock() {
  if (fd_ >= 0) {
    [[maybe_unused]] const int r = ::ftruncate(fd_, 0);  // no stale holder line once released
    ::close(fd_);  // releases the flock
  }
}

}  // namespace arcal
