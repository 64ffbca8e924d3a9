// A pool of child processes: jobs (an argument vector each, with a log file, an optional progress file
// and the jobs they wait for) run `parallel` at a time through posix_spawn (no shell), each in its own
// process group, with one progress bar. What `arcal run` schedules its trainings and traces with.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace arcal {

struct Job {
  std::string label;
  std::vector<std::string> args;   ///< after argv[0]
  std::string log;                 ///< stdout and stderr of the child ("" = inherit)
  std::string progress;            ///< --progress-file of a training ("" = none): "STEP TOTAL"
  std::vector<std::size_t> after;  ///< jobs (indices into the same list) that must finish before it starts
  pid_t pid = -1;
  bool done = false;
  bool signalled = false;  ///< the interrupt was forwarded to it
};

/// Runs `jobs` of executable `exe`, `parallel` at a time, with one progress bar (when bar_on). A job starts
/// when a slot is free and every job in its `after` list has finished, the earliest such job in list
/// order first; on_finished(i), if given, is called after job i exited successfully, and extra_status(),
/// if given, adds to the bar's text. A failed job stops new launches; running ones finish (their work is
/// kept); then InputError (the child exited 2: its input) or std::runtime_error names `caller`, the job
/// and its log's last lines. On SIGINT/SIGTERM (or a child that was interrupted itself, exit 3) no job
/// starts, the signal is forwarded once to the running ones, which write their checkpoints, and
/// Interrupted is thrown ending in "Resume with: " + resume_hint.
void run_jobs(const std::string& exe, std::vector<Job>& jobs, int parallel, const std::string& label, bool bar_on,
              const std::string& caller, const std::string& resume_hint,
              const std::function<void(std::size_t)>& on_finished = {},
              const std::function<std::string()>& extra_status = {});

}  // namespace arcal
