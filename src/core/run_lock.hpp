// One writer per run directory: an exclusive flock(2) on DIR/.lock, held for the life of the object
// (the kernel drops it when the process ends, however it ends). The holder writes its pid, host,
// start time and command into the file, so a second arcal on the same directory is refused with a
// message that names who holds it. Used by `arcal train` (RUN/) and `arcal run` (the study DIR/).
#pragma once

#include <string>

namespace arcal {

class DirLock {
 public:
  /// Locks DIR/.lock (DIR must exist). Throws InputError naming DIR and the holder (pid, host,
  /// since, command) when another process holds it, or naming the error when it cannot be created.
  /// `what` describes the holder's work for the lock file ("arcal train").
  DirLock(const std::string& dir, const std::string& what);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool wrote_ = false;  ///< the holder line is ours (cleared on release)
};

}  // namespace arcal
