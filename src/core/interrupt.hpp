// SIGINT / SIGTERM as a request to stop at the next resumable point: the handler only sets a flag,
// long loops (training steps, `arcal run`'s job loop) check it between steps, write what makes the
// work resumable and throw Interrupted (exit code 3). A second signal of either kind ends the process
// at once with the signal's default action (the shell then sees 130 or 143).
#pragma once

#include <functional>

namespace arcal {

/// Installs the handlers for SIGINT and SIGTERM (idempotent).
void install_interrupt_handlers();

/// True once SIGINT or SIGTERM arrived after install_interrupt_handlers().
bool interrupt_requested();

/// The signal that arrived (SIGINT or SIGTERM), 0 when none.
int interrupt_signal();

/// "SIGINT" / "SIGTERM" / "signal N".
const char* interrupt_signal_name();

/// Clears the flag (tests).
void reset_interrupt();

/// Long computations (a bootstrap draw, an optimiser iteration) call this between units of work. It
/// costs one thread-local load unless the calling thread installed a poll (ScopedInterruptPoll); then
/// it calls the poll at most once per interval and throws Interrupted when the poll says stop. The CLI
/// installs none (its loops check interrupt_requested() at resumable points); the Python module
/// installs one that runs Python's signal handlers, so Ctrl-C raises KeyboardInterrupt within about
/// the interval even while a call runs without the GIL. On a thread without a poll of its own (a worker
/// of parallel_for_index or of the probes' pool) it throws Interrupted once a poll of any thread said
/// stop, until that poll's outermost scope ends, so every worker of a stopped call stops too.
void poll_interrupt();

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
  std::function<bool()> stop_;
  long long interval_ns_;
  long long next_ns_ = 0;
  ScopedInterruptPoll* outer_;
};

}  // namespace arcal
