#include "core/interrupt.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "core/error.hpp"

namespace arcal {

namespace {

volatile sig_atomic_t g_signal = 0;

void on_signal(int sig) {
  if (g_signal != 0) {
    // Second signal: stop now, with the default action, so the exit status says which signal.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  g_signal = sig;
  const char msg[] = "\narcal: stopping at the next resumable point (send the signal again to stop at once)\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes in progress complete; loops poll the flag
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A closed terminal or ssh session: like SIGTERM, stop with a checkpoint (it used to end training
  // at once with exit 129 and no checkpoint).
  sigaction(SIGHUP, &sa, nullptr);
}

bool interrupt_requested() { return g_signal != 0; }
int interrupt_signal() { return g_signal; }

const char* interrupt_signal_name() {
  switch (g_signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case 0: return "no signal";
    default: return "a signal";
  }
}

void reset_interrupt() { g_signal = 0; }

namespace {
thread_local ScopedInterruptPoll* t_poll = nullptr;
// The call a worker thread (no poll of its own) works for: the outermost poll of the thread that
// started it (ScopedInterruptWorker). A stop said by one call's poll stops that call's workers only;
// two concurrent calls from two Python threads used to share one process-wide latch, so Ctrl-C in one
// raised KeyboardInterrupt in the other.
thread_local const ScopedInterruptPoll* t_call = nullptr;
long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

ScopedInterruptPoll::ScopedInterruptPoll(std::function<bool()> stop, int interval_ms)
    : stop_(std::move(stop)),
      interval_ns_(static_cast<long long>(interval_ms) * 1000000LL),
      outer_(t_poll),
      root_(outer_ != nullptr ? outer_->root_ : this) {
  t_poll = this;
}

ScopedInterruptPoll::~ScopedInterruptPoll() { t_poll = outer_; }

InterruptCall current_interrupt_call() { return InterruptCall{t_poll != nullptr ? t_poll->root_ : t_call}; }

ScopedInterruptWorker::ScopedInterruptWorker(InterruptCall call) : previous_(t_call) { t_call = call.root; }
ScopedInterruptWorker::~ScopedInterruptWorker() { t_call = previous_; }

void poll_interrupt() {
  ScopedInterruptPoll* p = t_poll;
  if (p == nullptr) {
    if (t_call != nullptr && t_call->stopped_.load(std::memory_order_relaxed)) throw Interrupted("interrupted");
    return;
  }
  if (p->root_->stopped_.load(std::memory_order_relaxed)) throw Interrupted("interrupted");
  const long long now = now_ns();
  if (now < p->next_ns_) return;
  p->next_ns_ = now + p->interval_ns_;
  if (p->stop_()) {
    p->root_->stopped_.store(true);
    throw Interrupted("interrupted");
  }
}

}  // namespace arcal
