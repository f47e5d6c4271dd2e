// MemoryTrimmer: hands freed heap pages back to the OS with malloc_trim(0).
//
// glibc keeps freed memory mapped in the arena that freed it, and gRPC's many threads spread a
// burst of calls over many arenas: after a flood the process holds the flood's peak heap
// (measured: live allocations flat, RSS up; docs/reliability.md). malloc_trim(0) hands the free
// pages of every arena back. The engine loop calls Maybe once per iteration: it trims on an idle
// wake-up after activity (at most once a second), and every 10 s while busy, so a server that is
// never idle does not creep either. Each trim's duration goes to the histogram it was given
// (flatstate_malloc_trim_seconds).
//
// Not thread-safe (the engine loop thread uses it). Never fails.
#ifndef FLATSTATE_SERVER_LOOP_MEMORY_TRIMMER_H_
#define FLATSTATE_SERVER_LOOP_MEMORY_TRIMMER_H_

#include "absl/time/time.h"
#include "server/core/metrics.h"

namespace flatstate::server {

class MemoryTrimmer {
 public:
  // `seconds` must outlive the trimmer.
  explicit MemoryTrimmer(Histogram* seconds) : seconds_(seconds) {}

  // Something ran since the last trim (work arrived, or the loop did not go idle).
  void NoteActivity() { busy_since_trim_ = true; }
  // Trims if there was activity since the last trim and the interval for `idle` (1 s after an
  // idle wake-up, else 10 s) has passed.
  void Maybe(bool idle);

 private:
  static constexpr absl::Duration kBusyInterval = absl::Seconds(10);
  Histogram* const seconds_;
  absl::Time last_trim_ = absl::InfinitePast();
  bool busy_since_trim_ = false;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_LOOP_MEMORY_TRIMMER_H_
