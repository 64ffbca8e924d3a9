#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace arcal {

namespace {
std::string temp_name(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}
}  // namespace

void write_atomic_with(const std::string& path, const std::function<void(const std::string&)>& writer) {
  const std::string tmp = temp_name(path);
  try {
    writer(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  fsync_path(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    throw InputError("write_file_atomic: cannot rename " + tmp + " to " + path + ": " + err);
  }
}

void write_file_atomic(const std::string& path, const std::string& content) {
  write_atomic_with(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError("write_file_atomic: cannot open " + tmp + " for writing: " + std::strerror(errno));
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) throw InputError("write_file_atomic: write to " + tmp + " failed");
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
