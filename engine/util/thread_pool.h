// A fixed pool of worker threads for data-parallel loops inside one engine step.
//
// ParallelFor splits [0, n) into contiguous ranges and blocks until all are done. Each item must
// be computed independently, so results never depend on the split. The calling thread takes part.
// Thread-safe for one caller at a time (the engine loop); a nested ParallelFor runs inline.
// (Independent callers on different threads are serialised: the second waits for the first job.
// "Nested" is detected per thread: a pool worker, or a caller while it runs its own range, runs
// any ParallelFor inline, even on another pool.) n < num_threads uses n ranges of one item.
// Waiting spins for up to kSpinMicros before sleeping on a condition variable: inside a step one
// ParallelFor follows another within microseconds, while waking a sleeping thread costs tens of
// microseconds (more on a VM). An idle pool therefore burns at most kSpinMicros per worker.
#ifndef FLATSTATE_ENGINE_UTIL_THREAD_POOL_H_
#define FLATSTATE_ENGINE_UTIL_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/parallel.h"

namespace flatstate {

class ThreadPool {
 public:
  // num_threads <= 0: std::thread::hardware_concurrency(). num_threads == 1: everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  static constexpr int kSpinMicros = 200;
  void WorkerLoop(int index);
  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_parts_ = 0;  // ranges in the current job: min(n, num_threads_); range 0 is the caller's
  // Written under mu_ (so the condition variables' predicates stay exact), read without it while
  // spinning.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  bool running_ = false;
};

// The kernels' Parallel interface (kernels/parallel.h) over a ThreadPool: one it does not own
// (which must outlive it), or its own of `num_threads` threads. Thread-safety is the pool's.
class PoolParallel final : public Parallel {
 public:
  explicit PoolParallel(ThreadPool* pool) : pool_(pool) {}
  explicit PoolParallel(int num_threads)
      : owned_(std::make_unique<ThreadPool>(num_threads)), pool_(owned_.get()) {}
  int num_threads() const override { return pool_->num_threads(); }
  void For(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override {
    pool_->ParallelFor(n, fn);
  }

 private:
  std::unique_ptr<ThreadPool> owned_;
  ThreadPool* pool_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_UTIL_THREAD_POOL_H_
