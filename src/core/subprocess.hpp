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

/// The environment for a child arcal that must not outlive this process (`arcal run`'s and `arcal
/// sweep`'s trainings and traces): this process's environment plus ARCAL_PARENT_PID=<our pid>. The
/// strings and the null-terminated pointer array for posix_spawn, which must outlive the call.
struct ChildEnvironment {
  std::vector<std::string> strings;
  std::vector<char*> pointers;
  char** envp() { return pointers.data(); }
};
ChildEnvironment child_environment();

/// First thing in main: when ARCAL_PARENT_PID is set (a child of child_environment), asks the kernel
/// for SIGTERM when the parent dies (PR_SET_PDEATHSIG: a `kill -9` of `arcal run` left its training
/// running and holding RUN/.lock), so the child checkpoints and ends; exits at once (status 1) when
/// the parent is already gone. The variable is removed, so the child's own children do not inherit it.
void die_with_parent();

}  // namespace arcal
