#include "engine/speculate/draft_pacer.h"

#include <algorithm>

namespace flatstate {

DraftPacer::DraftPacer(int max_draft) : max_draft_(std::max(max_draft, 1)), length_(max_draft_) {}

int DraftPacer::Next(int limit) {
  const int k = std::min({limit, max_draft_, length_});
  if (k < 1) return 0;
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  return k;
}

void DraftPacer::Feedback(int drafted, int accepted) {
  if (drafted <= 0) return;
  // The next draft's length: one more than this one kept when it fell short, twice as long (up
  // to max_draft) when all of it was kept.
  length_ = accepted >= drafted ? std::min(2 * length_, max_draft_) : accepted + 1;
  if (accepted >= std::min(drafted, kPaysOff)) {
    next_pause_ = 1;
    return;
  }
  pause_ = next_pause_;
  next_pause_ = std::min(next_pause_ * 2, kMaxPause);
}

}  // namespace flatstate
