#include "core/job_pool.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <utility>

#include "core/atomic_file.hpp"
#include "core/check.hpp"
#include "core/error.hpp"
#include "core/interrupt.hpp"
#include "core/ownership.hpp"
#include "core/progress.hpp"
#include "core/subprocess.hpp"

namespace arcal {

namespace {

/// The last `lines` lines of a log, for error messages.
std::string tail(const std::string& path, int lines) {
  const std::string s = read_file(path);
  std::size_t pos = s.size();
  for (int i = 0; i <= lines && pos > 0; ++i) {
    pos = s.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
  }
  return s.substr(pos == 0 ? 0 : pos + 1);
}

/// Forwards the interrupt to a running child, once: a second signal would make it stop without
/// its checkpoint (core/interrupt.hpp).
void forward_interrupt(Job& j) {
  if (j.pid > 0 && !j.done && !j.signalled) {
    kill(j.pid, interrupt_signal());
    j.signalled = true;
  }
}

pid_t spawn(const std::string& exe, const Job& job, const std::string& caller) {
  std::vector<std::string> argv_s{exe};
  argv_s.insert(argv_s.end(), job.args.begin(), job.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!job.log.empty()) {
    // The same open as the child's below, here first so that a link at the log's name is refused
    // with a message (core/ownership.hpp) instead of a failed spawn.
    ::close(open_own_file(caller, job.log, O_WRONLY | O_CREAT | O_APPEND));
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, job.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW,
                                     0644);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
  }
  // Each child in its own process group: a terminal's Ctrl-C reaches only this process, which
  // forwards it once to every child (a child that saw it twice would stop without its checkpoint).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  auto env = child_environment();  // the child dies with us (core/subprocess.hpp die_with_parent)
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, &attr, argv.data(), env.envp());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error("cannot start " + exe + " " + job.label + ": " + std::strerror(rc));
  return pid;
}

/// Progress of a training child from its --progress-file: {step, total} ({0, 0} before the first).
std::pair<long long, long long> read_progress(const std::string& path) {
  std::ifstream in(path);
  long long s = 0, t = 0;
  if (in >> s >> t) return {s, t};
  return {0, 0};
}

}  // namespace

void run_jobs(const std::string& exe, std::vector<Job>& jobs, int parallel, const std::string& label, bool bar_on,
              const std::string& caller, const std::string& resume_hint,
              const std::function<void(std::size_t)>& on_finished, const std::function<std::string()>& extra_status) {
  if (jobs.empty()) return;
  ProgressBar bar(label, 1000, bar_on);
  std::size_t running = 0, finished = 0;
  std::string failure;
  int failure_code = 0;  // the failed child's exit code: 2 (its input) stays 2, anything else is 1
  bool child_interrupted = false;
  auto ready = [&](const Job& j) {
    return j.pid < 0 && std::all_of(j.after.begin(), j.after.end(), [&](std::size_t a) { return jobs[a].done; });
  };
  while (finished < jobs.size()) {
    while (failure.empty() && !child_interrupted && !interrupt_requested() && running < std::size_t(parallel)) {
      const auto next = std::find_if(jobs.begin(), jobs.end(), ready);
      if (next == jobs.end()) break;
      next->pid = spawn(exe, *next, caller);
      ++running;
    }
    if (running == 0) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (auto& j : jobs)
        if (j.pid == pid && !j.done) {
          j.done = true;
          --running;
          ++finished;
          const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
          const bool stopped = (WIFEXITED(status) && WEXITSTATUS(status) == 3) || (j.signalled && WIFSIGNALED(status));
          if (stopped) {
            child_interrupted = true;
            continue;
          }
          if (!ok && failure.empty()) failure_code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
          if (!ok && failure.empty())
            failure = j.label + " failed (" +
                      (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                         : "signal " + std::to_string(WTERMSIG(status))) +
                      "); last lines of " + j.log + ":\n" + tail(j.log, 5);
          if (ok && on_finished) on_finished(std::size_t(&j - jobs.data()));
        }
      continue;
    }
    if (interrupt_requested())
      for (auto& j : jobs) forward_interrupt(j);
    // Progress: finished jobs count 1, running trainings their step fraction.
    double frac = double(finished);
    long long steps = 0, total = 0;
    for (const auto& j : jobs)
      if (j.pid > 0 && !j.done && !j.progress.empty()) {
        auto [s, t] = read_progress(j.progress);
        if (t > 0) frac += double(s) / double(t);
        steps += s;
        total += t;
      }
    bar.update(static_cast<long long>(1000.0 * frac / double(jobs.size())),
               std::to_string(finished) + "/" + std::to_string(jobs.size()) + " done, " + std::to_string(running) +
                   " running" +
                   (total > 0 ? ", steps " + std::to_string(steps) + "/" + std::to_string(total) : std::string()) +
                   (extra_status ? extra_status() : std::string()));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  bar.update(1000, std::to_string(finished) + "/" + std::to_string(jobs.size()) + " done");
  bar.finish();
  if (interrupt_requested())
    throw Interrupted(std::string("run stopped by ") + interrupt_signal_name() + " during " + label +
                      "; finished runs and checkpoints are kept. Resume with: " + resume_hint);
  if (!failure.empty()) {
    if (failure_code == 2) throw_input(caller, failure);
    throw std::runtime_error(caller + ": " + failure);
  }
  if (child_interrupted)
    throw Interrupted("run stopped: a " + label +
                      " child was interrupted (exit 3) by a signal sent to it; finished "
                      "runs and checkpoints are kept. Resume with: " +
                      resume_hint);
}

}  // namespace arcal
