// parallel_for_index: every index runs exactly once whatever the thread count, and a failing job's
// exception reaches the caller (the lowest failing index, as a serial loop would report).
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/parallel.hpp"

TEST(Parallel, EveryIndexRunsOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8, 0}) {
    std::vector<int> hits(1000, 0);
    std::atomic<int> calls{0};
    arcal::parallel_for_index(hits.size(), threads, [&](std::size_t i) {
      hits[i] += int(i % 7) + 1;
      ++calls;
    });
    EXPECT_EQ(calls.load(), 1000);
    for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], int(i % 7) + 1) << "threads " << threads;
  }
  EXPECT_EQ(arcal::worker_count(4, 2), 2u);
  EXPECT_EQ(arcal::worker_count(1, 100), 1u);
  EXPECT_GE(arcal::worker_count(0, 100), 1u);
}

TEST(Parallel, LowestFailingIndexIsRethrown) {
  for (int threads : {1, 4}) {
    try {
      arcal::parallel_for_index(50, threads, [](std::size_t i) {
        if (i == 17 || i == 33) throw std::runtime_error("job " + std::to_string(i));
      });
      FAIL() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "job 17");
    }
  }
}
