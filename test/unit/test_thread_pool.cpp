#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "thread_pool.h"

namespace tsdg {
namespace {

TEST(ThreadPool, VisitsEveryItemOnceInFixedChunks) {
  ThreadPool pool(3);
  ASSERT_EQ(pool.size(), 3);
  RunControl control;
  std::vector<std::atomic<int>> visits(1000);
  std::vector<int64_t> chunk_begin(1000, -1);
  pool.parallel_for(1000, 64, [&](int64_t begin, int64_t end, int worker) {
    EXPECT_GE(worker, 0);
    EXPECT_LT(worker, 3);
    EXPECT_EQ(begin % 64, 0);
    EXPECT_EQ(end, std::min<int64_t>(begin + 64, 1000));
    for (int64_t i = begin; i < end; ++i) {
      visits[i].fetch_add(1);
      chunk_begin[i] = begin;
    }
  }, control);
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(visits[i].load(), 1) << i;
    EXPECT_EQ(chunk_begin[i], i / 64 * 64);
  }
}

TEST(ThreadPool, ReusedForManyLoops) {
  ThreadPool pool(2);
  RunControl control;
  for (int round = 0; round < 200; ++round) {
    std::atomic<int64_t> sum{0};
    pool.parallel_for(100, 7, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) sum += i;
    }, control);
    ASSERT_EQ(sum.load(), 4950);
  }
}

TEST(ThreadPool, RethrowsTheBodysException) {
  ThreadPool pool(2);
  RunControl control;
  EXPECT_THROW(pool.parallel_for(100, 1, [&](int64_t begin, int64_t, int) {
    if (begin == 37) throw std::runtime_error("boom");
  }, control), std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int> count{0};
  pool.parallel_for(10, 1, [&](int64_t, int64_t, int) { ++count; }, control);
  EXPECT_EQ(count.load(), 10);
}

TEST(ThreadPool, StopsAndThrowsWhenCancelled) {
  ThreadPool pool(2);
  std::atomic<bool> cancel{false};
  RunControl control;
  control.cancel = &cancel;
  std::atomic<int> chunks{0};
  try {
    pool.parallel_for(10000, 1, [&](int64_t begin, int64_t, int) {
      ++chunks;
      if (begin == 10) cancel = true;
    }, control);
    FAIL() << "expected Cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Cancelled);
  }
  EXPECT_LT(chunks.load(), 10000);
}

TEST(ThreadPool, NestedLoopRunsInline) {
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  std::atomic<int64_t> sum{0};
  parallel_for(control, 4, 1, [&](int64_t, int64_t, int) {
    parallel_for(control, 10, 3, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) sum += i;
    });
  });
  EXPECT_EQ(sum.load(), 4 * 45);
}

TEST(ThreadPool, NullPoolRunsOnCaller) {
  RunControl control;
  EXPECT_EQ(worker_count(control), 1);
  std::vector<int> order;
  parallel_for(control, 10, 4, [&](int64_t begin, int64_t end, int worker) {
    EXPECT_EQ(worker, 0);
    for (int64_t i = begin; i < end; ++i) order.push_back(static_cast<int>(i));
  });
  std::vector<int> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(order, expected);
}

}  // namespace
}  // namespace tsdg
