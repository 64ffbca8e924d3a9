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
}

bool interrupt_requested() { return g_signal != 0; }
int interrupt_signal() { return g_signal; }

const char* interrupt_signal_name() {
  switch (g_signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case 0: return "no signal";
    default: return "a signal";
  }
}

void reset_interrupt() { g_signal = 0; }

namespace {
thread_local ScopedInterruptPoll* t_poll = nullptr;
// Set when a poll said stop, until the outermost poll of that call ends: worker threads (which have
// no poll of their own) see it in poll_interrupt and stop too.
std::atomic<bool> g_stop_latch{false};
long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

ScopedInterruptPoll::ScopedInterruptPoll(std::function<bool()> stop, int interval_ms)
    : stop_(std::move(stop)), interval_ns_(static_cast<long long>(interval_ms) * 1000000LL), outer_(t_poll) {
  if (outer_ == nullptr) g_stop_latch.store(false);
  t_poll = this;
}

ScopedInterruptPoll::~ScopedInterruptPoll() {
  t_poll = outer_;
  if (outer_ == nullptr) g_stop_latch.store(false);
}

void poll_interrupt() {
  ScopedInterruptPoll* p = t_poll;
  if (p == nullptr) {
    if (g_stop_latch.load(std::memory_order_relaxed)) throw Interrupted("interrupted");
    return;
  }
  const long long now = now_ns();
  if (now < p->next_ns_) return;
  p->next_ns_ = now + p->interval_ns_;
  if (p->stop_()) {
    g_stop_latch.store(true);
    throw Interrupted("interrupted");
  }
}

}  // namespace arcal
