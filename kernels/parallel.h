// The one parallel-for abstraction kernels use, so kernels do not depend on the engine's thread
// pool (dependencies run kernels -> engine). The engine adapts its ThreadPool to this interface.
//
// For(n, fn) calls fn(begin, end) over disjoint ranges covering [0, n) and returns when all are
// done. Implementations must be safe to call from one thread at a time.
#ifndef FLATSTATE_KERNELS_PARALLEL_H_
#define FLATSTATE_KERNELS_PARALLEL_H_

#include <cstdint>
#include <functional>

namespace flatstate {

class Parallel {
 public:
  virtual ~Parallel() = default;
  virtual int num_threads() const = 0;
  virtual void For(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const = 0;
};

// Runs everything on the calling thread.
class SerialParallel final : public Parallel {
 public:
  int num_threads() const override { return 1; }
  void For(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override {
    if (n > 0) fn(0, n);
  }
};

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_PARALLEL_H_
