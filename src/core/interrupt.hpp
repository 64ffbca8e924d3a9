// SIGINT / SIGTERM / SIGHUP as a request to stop at the next resumable point: the handler only sets a flag,
// long loops (training steps, `arcal run`'s job loop) check it between steps, write what makes the
// work resumable and throw Interrupted (exit code 3). A second signal of either kind ends the process
// at once with the signal's default action (the shell then sees 130 or 143).
#pragma once

#include <atomic>
#include <functional>

namespace arcal {

/// Installs the handlers for SIGINT, SIGTERM and SIGHUP (idempotent).
void install_interrupt_handlers();

/// True once SIGINT, SIGTERM or SIGHUP arrived after install_interrupt_handlers().
bool interrupt_requested();

/// The signal that arrived (SIGINT, SIGTERM or SIGHUP), 0 when none.
int interrupt_signal();

/// "SIGINT" / "SIGTERM" / "SIGHUP" / "a signal".
const char* interrupt_signal_name();

/// Clears the flag (tests).
void reset_interrupt();

/// Long computations (a bootstrap draw, an optimiser iteration) call this between units of work. It
/// costs one thread-local load unless the calling thread installed a poll (ScopedInterruptPoll); then
/// it calls the poll at most once per interval and throws Interrupted when the poll says stop. The CLI
/// installs none (its loops check interrupt_requested() at resumable points); the Python module
/// installs one that runs Python's signal handlers, so Ctrl-C raises KeyboardInterrupt within about
/// the interval even while a call runs without the GIL. On a worker thread (parallel_for_index, which
/// passes the starting thread's call on with ScopedInterruptWorker) it throws Interrupted once the
/// poll of the call it works for said stop, so every worker of a stopped call stops too, and the
/// workers of another thread's concurrent call do not.
void poll_interrupt();

class ScopedInterruptPoll;

/// The call a thread works for: its own outermost poll, or the call it was started for as a worker.
struct InterruptCall {
  const ScopedInterruptPoll* root = nullptr;
};
InterruptCall current_interrupt_call();

/// Makes the current (worker) thread work for `call` for the life of the object.
class ScopedInterruptWorker {
 public:
  explicit ScopedInterruptWorker(InterruptCall call);
  ~ScopedInterruptWorker();
  ScopedInterruptWorker(const ScopedInterruptWorker&) = delete;
  ScopedInterruptWorker& operator=(const ScopedInterruptWorker&) = delete;

 private:
  const ScopedInterruptPoll* previous_;
};

/// Installs `stop` as the current thread's poll for the life of the object (nested polls restore the
/// outer one). `stop` returns true to stop the computation.
class ScopedInterruptPoll {
 public:
  explicit ScopedInterruptPoll(std::function<bool()> stop, int interval_ms = 100);
  ~ScopedInterruptPoll();
  ScopedInterruptPoll(const ScopedInterruptPoll&) = delete;
  ScopedInterruptPoll& operator=(const ScopedInterruptPoll&) = delete;

 private:
  friend void poll_interrupt();
  friend InterruptCall current_interrupt_call();
  std::function<bool()> stop_;
  long long interval_ns_;
  long long next_ns_ = 0;
  ScopedInterruptPoll* outer_;
  ScopedInterruptPoll* root_;         ///< the outermost poll of this thread: the call
  std::atomic<bool> stopped_{false};  ///< set on the root when any poll of the call said stop
};

}  // namespace arcal
