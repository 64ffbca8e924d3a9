#include "core/paths.hpp"

#include <sys/stat.h>

#include <filesystem>

#include "core/error.hpp"

namespace arcal {

namespace fs = std::filesystem;

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {}, sb {};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
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
  if (fs::is_directory(st))
    throw InputError(flag + ": " + out + " is a directory, but must be a file path");
  if (fs::exists(st) && !force)
    throw InputError(flag + ": " + out + " already exists; pass --force to replace it (the new file replaces it "
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

}  // namespace arcal
