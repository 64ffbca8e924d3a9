#include "core/subprocess.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "core/error.hpp"

extern char** environ;

namespace arcal {

int run_program(const std::vector<std::string>& args, const SpawnOptions& o) {
  if (args.empty()) throw InputError("run_program: empty argument vector");
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // The directory change comes first so that relative output paths are relative to the caller.
  if (!o.stdout_path.empty())
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, o.stdout_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
  if (!o.stderr_path.empty())
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, o.stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, o.cwd.c_str());
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  // A missing program is a failure of the environment, not of the user's input (exit code 1).
  if (rc != 0) throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waiting for " + args[0] + ": " + std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

namespace {
const char kParentVar[] = "ARCAL_PARENT_PID";
}

ChildEnvironment child_environment() {
  ChildEnvironment e;
  for (char** v = environ; v != nullptr && *v != nullptr; ++v)
    if (std::strncmp(*v, "ARCAL_PARENT_PID=", sizeof kParentVar) != 0) e.strings.emplace_back(*v);
  e.strings.push_back(std::string(kParentVar) + "=" + std::to_string(::getpid()));
  for (auto& s : e.strings) e.pointers.push_back(s.data());
  e.pointers.push_back(nullptr);
  return e;
}

void die_with_parent() {
  const char* v = std::getenv(kParentVar);
  if (v == nullptr) return;
  const long parent = std::strtol(v, nullptr, 10);
  ::unsetenv(kParentVar);
  if (parent <= 0) return;
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The parent may have died before the request was made: then no signal comes, so stop here.
  if (::getppid() != static_cast<pid_t>(parent)) {
    std::fprintf(stderr, "arcal: failed: the parent arcal process (pid %ld) has ended; stopping\n", parent);
    std::_Exit(1);
  }
}

}  // namespace arcal
