// SamplingOverride: a Generate that sets its own sampling params on a named session uses them,
// seeded with their seed, for that call only. Apply saves the session's params and RNG and
// installs the call's; Restore puts the saved ones back when the stream ends.
//
// Value type, one per stream; not thread-safe (the engine loop thread uses it). Never fails.
#ifndef FLATSTATE_SERVER_LOOP_SAMPLING_OVERRIDE_H_
#define FLATSTATE_SERVER_LOOP_SAMPLING_OVERRIDE_H_

#include "engine/sampling/sampler.h"
#include "engine/session/session_state.h"

namespace flatstate::server {

class SamplingOverride {
 public:
  void Apply(SessionState* s, const SamplingParams& params) {
    active_ = true;
    saved_ = s->sampling;
    saved_rng_ = s->rng;
    s->sampling = params;
    s->rng.Seed(params.seed);
  }
  // No-op unless Apply was called.
  void Restore(SessionState* s) const {
    if (!active_) return;
    s->sampling = saved_;
    s->rng = saved_rng_;
  }

 private:
  bool active_ = false;
  SamplingParams saved_;
  Rng saved_rng_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_LOOP_SAMPLING_OVERRIDE_H_
