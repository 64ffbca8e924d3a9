// Running independent, index-addressed jobs on worker threads (standard library only). Each job
// writes only its own output slot, so results are the same for any number of threads; an exception
// from a job is rethrown on the caller after all workers stop (the lowest failing index wins, as in
// a serial loop).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

#include "core/interrupt.hpp"

namespace arcal {

/// Number of workers for `threads` (0 = the hardware's) and `jobs` jobs: at least 1, at most jobs.
inline std::size_t worker_count(int threads, std::size_t jobs) {
  const std::size_t hw = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t want = threads > 0 ? std::size_t(threads) : hw;
  return std::max<std::size_t>(1, std::min(want, jobs));
}

/// Calls fn(i) for every i in [0, n) on worker_count(threads, n) threads (inline when that is 1).
/// Every thread calls poll_interrupt() before each job, so a stopped call (Ctrl-C from Python) ends
/// after the jobs in progress, with Interrupted rethrown on the caller.
template <class Fn>
void parallel_for_index(std::size_t n, int threads, Fn&& fn) {
  const std::size_t workers = worker_count(threads, n);
  if (workers <= 1) {
    for (std::size_t i = 0; i < n; ++i) {
      poll_interrupt();
      fn(i);
    }
    return;
  }
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> errors(n);
  const InterruptCall call = current_interrupt_call();  // the workers stop with this call only
  auto work = [&] {
    ScopedInterruptWorker as_worker(call);
    for (std::size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        poll_interrupt();
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace arcal
