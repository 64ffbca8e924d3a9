#include "core/interrupt.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstring>

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

}  // namespace arcal
