// SIGINT / SIGTERM as a request to stop at the next resumable point: the handler only sets a flag,
// long loops (training steps, `arcal run`'s job loop) check it between steps, write what makes the
// work resumable and throw Interrupted (exit code 3). A second signal of either kind ends the process
// at once with the signal's default action (the shell then sees 130 or 143).
#pragma once

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

}  // namespace arcal
