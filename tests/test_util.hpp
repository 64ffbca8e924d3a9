// Helpers shared by the test suites: a fresh scratch directory under the build tree and running a
// command with its stdout and stderr captured to files in that directory (per test, so ctest -j can
// run test processes side by side), and the message of an expected InputError. Header-only.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.hpp"

namespace arcal::testing {

/// ARCAL_BINARY_DIR/test_tmp/REL, removed and created empty.
inline std::string fresh_dir(const std::string& rel) {
  const auto d = std::filesystem::path(ARCAL_BINARY_DIR) / "test_tmp" / rel;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct CmdResult {
  int code;  ///< exit status, -1 when killed by a signal
  std::string out, err;
};

/// Runs `cmd` through the shell with stdout and stderr in DIR/TAG.stdout and DIR/TAG.stderr.
inline CmdResult run_command(const std::string& cmd, const std::string& dir, const std::string& tag = "cmd") {
  const std::string o = dir + "/" + tag + ".stdout", e = dir + "/" + tag + ".stderr";
  const int status = std::system((cmd + " > " + o + " 2> " + e).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(o), slurp(e)};
}

/// The message of the InputError that f() throws, or "(no InputError)" when it throws none (so a
/// `find(expected)` on the result fails).
template <class F>
std::string input_error_message(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no InputError)";
}

}  // namespace arcal::testing
