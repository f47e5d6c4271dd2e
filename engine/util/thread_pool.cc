#include "engine/util/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace flatstate {
namespace {

// True on pool workers and on a caller while it runs its share of a ParallelFor: a ParallelFor
// issued from such a thread runs inline instead of waiting on workers that are busy (or on itself).
thread_local bool tls_inside_parallel_for = false;

// [begin, end) of part `i` of `parts` over [0, n): contiguous, in order, sizes differ by <= 1.
inline void PartRange(int64_t n, int parts, int i, int64_t* begin, int64_t* end) {
  *begin = n * i / parts;
  *end = n * (i + 1) / parts;
}

// Busy-waits until done() or `micros` have passed; returns done().
template <typename Pred>
bool SpinUntil(Pred done, int micros) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  while (!done()) {
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
  return true;
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads_ = std::max(num_threads, 1);
  workers_.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (num_threads_ == 1 || n == 1 || tls_inside_parallel_for) {
    fn(0, n);
    return;
  }
  const int parts = static_cast<int>(std::min<int64_t>(n, num_threads_));
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Serialise independent callers: wait for a running job to finish.
    done_cv_.wait(lock, [this] { return !running_; });
    running_ = true;
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    pending_ = parts - 1;
    ++generation_;
  }
  cv_.notify_all();

  int64_t begin, end;
  PartRange(n, parts, 0, &begin, &end);
  tls_inside_parallel_for = true;
  fn(begin, end);
  tls_inside_parallel_for = false;

  SpinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; }, kSpinMicros);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  running_ = false;
  lock.unlock();
  done_cv_.notify_all();  // wake a caller waiting for the pool
}

void ThreadPool::WorkerLoop(int index) {
  tls_inside_parallel_for = true;
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (!stop_ && generation_ == seen) {
      lock.unlock();
      SpinUntil([&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; },
                kSpinMicros);
      lock.lock();
    }
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= job_parts_) continue;  // fewer items than threads: nothing for this worker
    const std::function<void(int64_t, int64_t)>* job = job_;
    int64_t begin, end;
    PartRange(job_n_, job_parts_, index, &begin, &end);
    lock.unlock();
    (*job)(begin, end);
    lock.lock();
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

}  // namespace flatstate
