// Progress: a one-line progress bar on stderr, drawn only when enabled (main enables it when
// stderr is a terminal). Thread-safe (one mutex); redraws at most ten times a second; never fails.
#ifndef FLATSTATE_CLIENTS_LOADTEST_PROGRESS_H_
#define FLATSTATE_CLIENTS_LOADTEST_PROGRESS_H_

#include <chrono>
#include <string>

#include "absl/synchronization/mutex.h"

namespace flatstate::loadtest {

class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  ~Progress() { Clear(); }

  // Shows `label` with `done` of `total` (total <= 0: no bar).
  void Update(const std::string& label, double done, double total);
  // Erases the bar (before printing other lines).
  void Clear();
  bool enabled() const { return enabled_; }

 private:
  const bool enabled_;
  absl::Mutex mu_;
  bool shown_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_draw_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flatstate::loadtest

#endif  // FLATSTATE_CLIENTS_LOADTEST_PROGRESS_H_
