// Error types shared by every layer of arcal.
// InputError: the user's data, files or flags are wrong (exit code 2 in the CLI).
// Interrupted: SIGINT/SIGTERM stopped the work at a resumable point (exit code 3); the message says
// what was kept and how to resume.
// Internal invariants use ARCAL_ASSERT, which stays on in release builds and aborts loudly.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace arcal {

/// A problem with user input (file, array, flag). Message names function, object, index, constraint.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The work was stopped by SIGINT or SIGTERM at a point where it can be resumed (exit code 3).
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "arcal: internal error: %s (%s) at %s:%d\n", msg, expr, file, line);
  std::abort();
}

}  // namespace arcal

#define ARCAL_ASSERT(cond, msg)                                          \
  do {                                                                   \
    if (!(cond)) ::arcal::assert_fail(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
