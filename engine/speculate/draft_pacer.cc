#include "engine/speculate/draft_pacer.h"

#include <algorithm>
#include <cmath>

namespace flatstate {

DraftPacer::DraftPacer(int max_draft) : max_draft_(std::max(max_draft, 1)) {}

int DraftPacer::Next(int limit, std::span<const double> cost) {
  const int cap = std::min(limit, max_draft_);
  if (cap < 1) return 0;
  if (pause_ > 0) {
    --pause_;
    return 0;
  }
  const double p = acceptance();
  int best = 1;
  double best_gain = 0, best_cost = 1, expected = 1, term = 1;
  for (int k = 1; k <= cap; ++k) {
    term *= p;
    expected += term;
    const double c =
        static_cast<size_t>(k) < cost.size() ? cost[static_cast<size_t>(k)] : 1 + kPriorRowCost * k;
    if (const double gain = expected / c; gain >= best_gain) {  // ties: the longer
      best_gain = gain;
      best_cost = c;
      best = k;
    }
  }
  if (best_gain >= kMinGain || best_cost <= 1) {  // clearly paying, or free
    next_pause_ = 1;
    probe_ = false;
    follow_up_ = false;
    refused_probe_ = false;
    return best;
  }
  if (probe_) {  // the pause is over (one token), or that token was kept (the best length at
    probe_ = false;  // the estimate, though below kMinGain): see whether the text has changed
    probing_ = true;
    return follow_up_ ? best : 1;
  }
  // This step is the pause's first. After a refused probe it lasts long enough that the next
  // probe, if refused too, costs at most kProbeBudget of the steps it ends.
  int floor = 1;
  if (refused_probe_) {
    const double probe_cost = cost.size() > 1 ? cost[1] : 1 + kPriorRowCost;
    // Less a hair, so that 1.6 - 1 = 0.6000000000000001 over 0.03 is 20 steps, not 21.
    floor = static_cast<int>(std::ceil((probe_cost - 1) / kProbeBudget - 1e-9));
  }
  pause_ = std::min(std::max(next_pause_, floor), kMaxPause) - 1;
  next_pause_ = std::min(next_pause_ * 2, kMaxPause);
  probe_ = true;
  return 0;
}

void DraftPacer::Feedback(int drafted, int accepted) {
  if (drafted <= 0) return;
  accepted = std::clamp(accepted, 0, drafted);
  kept_[whole_] = kDecay * kept_[whole_] + accepted;
  tried_[whole_] = kDecay * tried_[whole_] + accepted + (accepted < drafted ? 1 : 0);
  whole_ = accepted >= drafted ? 1 : 0;
  if (probing_) {  // a one-token probe kept whole is followed at once by a second probe
    probing_ = false;
    refused_probe_ = whole_ == 0;
    probe_ = whole_ == 1 && !follow_up_;
    follow_up_ = probe_;
  }
}

}  // namespace flatstate
