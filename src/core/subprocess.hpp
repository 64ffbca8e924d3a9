// Running an external program without a shell: posix_spawnp with an argument vector, optionally in
// another working directory and with stdout/stderr sent to a file. No string is ever interpreted by
// a shell, so paths and names with quotes, spaces, `$` or newlines are passed through unchanged.
#pragma once

#include <string>
#include <vector>

namespace arcal {

struct SpawnOptions {
  std::string cwd;          ///< "" = the current directory
  std::string stdout_path;  ///< "" = inherit
  std::string stderr_path;  ///< "" = inherit
};

/// Runs argv[0] (looked up in PATH) with argv and waits for it. Returns its exit status, or
/// 128 + N when signal N ended it. Throws std::runtime_error when it cannot be started (naming
/// argv[0]; e.g. gnuplot not installed: a failure of the environment, exit code 1 in the CLI).
int run_program(const std::vector<std::string>& argv, const SpawnOptions& options = {});

}  // namespace arcal
