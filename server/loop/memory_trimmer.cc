#include "server/loop/memory_trimmer.h"

#include <malloc.h>

namespace flatstate::server {

void MemoryTrimmer::Maybe(bool idle) {
  if (!busy_since_trim_) return;
  const absl::Time now = absl::Now();
  if (now - last_trim_ < (idle ? absl::Seconds(1) : kBusyInterval)) return;
  malloc_trim(0);
  last_trim_ = absl::Now();
  busy_since_trim_ = false;
  seconds_->Observe(absl::ToDoubleSeconds(last_trim_ - now));
}

}  // namespace flatstate::server
