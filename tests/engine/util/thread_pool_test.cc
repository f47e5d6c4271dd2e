#include "engine/util/thread_pool.h"

#include <atomic>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

// Runs ParallelFor over [0, n) and checks every index is visited exactly once.
void CheckCoverage(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int> calls{0};
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    EXPECT_LT(b, e);
    calls.fetch_add(1);
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
  EXPECT_LE(calls.load(), pool.num_threads());
  EXPECT_LE(calls.load(), std::max<int64_t>(n, 0));
}

TEST(ThreadPoolTest, NumThreads) {
  EXPECT_EQ(ThreadPool(1).num_threads(), 1);
  EXPECT_EQ(ThreadPool(3).num_threads(), 3);
  EXPECT_GE(ThreadPool(0).num_threads(), 1);
  EXPECT_GE(ThreadPool(-2).num_threads(), 1);
}

TEST(ThreadPoolTest, Sums) {
  for (int threads : {1, 2, 4, 7}) {
    ThreadPool pool(threads);
    constexpr int64_t kN = 100000;
    std::vector<int64_t> partial(kN, 0);
    pool.ParallelFor(kN, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) partial[i] = i * i;
    });
    int64_t sum = std::accumulate(partial.begin(), partial.end(), int64_t{0});
    EXPECT_EQ(sum, (kN - 1) * kN * (2 * kN - 1) / 6) << threads;
  }
}

TEST(ThreadPoolTest, EdgeSizes) {
  for (int threads : {1, 3, 8}) {
    ThreadPool pool(threads);
    bool called = false;
    pool.ParallelFor(0, [&](int64_t, int64_t) { called = true; });
    pool.ParallelFor(-5, [&](int64_t, int64_t) { called = true; });
    EXPECT_FALSE(called);
    for (int64_t n : {1, 2, 3, 5, 7, 8, 9, 1000}) CheckCoverage(pool, n);
  }
}

TEST(ThreadPoolTest, ContiguousOrderedRanges) {
  ThreadPool pool(4);
  std::vector<std::pair<int64_t, int64_t>> ranges(4, {-1, -1});
  std::atomic<int> next{0};
  pool.ParallelFor(10, [&](int64_t b, int64_t e) { ranges[next++] = {b, e}; });
  ASSERT_EQ(next.load(), 4);
  std::sort(ranges.begin(), ranges.end());
  int64_t at = 0;
  for (auto [b, e] : ranges) {
    EXPECT_EQ(b, at);
    EXPECT_GE(e - b, 2);
    EXPECT_LE(e - b, 3);
    at = e;
  }
  EXPECT_EQ(at, 10);
}

TEST(ThreadPoolTest, ManyCallsInARow) {
  ThreadPool pool(4);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 2000; ++rep) {
    const int64_t n = rep % 13;
    pool.ParallelFor(n, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  }
  int64_t want = 0;
  for (int rep = 0; rep < 2000; ++rep) want += rep % 13;
  EXPECT_EQ(total.load(), want);
}

TEST(ThreadPoolTest, NestedRunsInline) {
  ThreadPool pool(4);
  constexpr int64_t kOuter = 8, kInner = 50;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  pool.ParallelFor(kOuter, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const auto me = std::this_thread::get_id();
      pool.ParallelFor(kInner, [&](int64_t ib, int64_t ie) {
        EXPECT_EQ(std::this_thread::get_id(), me);  // inline on the same thread
        EXPECT_EQ(ib, 0);
        EXPECT_EQ(ie, kInner);
        for (int64_t j = ib; j < ie; ++j) hits[i * kInner + j].fetch_add(1);
      });
    }
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  // The pool still works normally afterwards.
  CheckCoverage(pool, 100);
}

TEST(ThreadPoolTest, IndependentCallersAreSerialised) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  auto work = [&] {
    for (int rep = 0; rep < 200; ++rep) {
      pool.ParallelFor(30, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
    }
  };
  std::thread t1(work), t2(work);
  t1.join();
  t2.join();
  EXPECT_EQ(total.load(), 2 * 200 * 30);
}

}  // namespace
}  // namespace flatstate
