// The chunk grid a step's prefill split must fall on, in one place: the engine (Engine::Step)
// and the server's scheduler (server/scheduler.h) both call ChunkGridTokens.
//
// The chunked linear-attention form puts its chunks on absolute multiples of the chunk size, so a
// prompt gives the same floats whatever the token budget only if every split of it ends on that
// grid. One more rule makes the floats independent of the budget bit for bit: a run of several
// tokens that would cross a grid point and end off the grid stops at the last grid point it
// crosses, and the rest (fewer than `chunk_size` tokens) runs in the next step. Without it the
// last token of a prompt could run alone (the recurrent form) under one budget and as the last
// row of a chunk (the chunked form) under another, which agree only to rounding. It also puts the
// state at the prompt's last grid point between two steps, where the prefix cache
// (engine/cache/prefix_cache.h) snapshots it; the rule depends only on (position, pending), so a
// session restored from a checkpoint plans the same runs. Pure functions; thread-safe; never fail.
#ifndef FLATSTATE_ENGINE_RUNTIME_STEP_PLAN_H_
#define FLATSTATE_ENGINE_RUNTIME_STEP_PLAN_H_

#include <algorithm>
#include <cstdint>

namespace flatstate {

// The last multiple of `chunk_size` (< 1 counts as 1) at or before `tokens` (0 for tokens <= 0).
inline int64_t LastGridPoint(int64_t tokens, int64_t chunk_size) {
  const int64_t c = std::max<int64_t>(chunk_size, 1);
  return tokens <= 0 ? 0 : tokens / c * c;
}

// How many of a session's `pending` tokens (it has run `position` tokens) a step with `budget`
// tokens runs: all of them if they fit; else the largest prefix that ends on a multiple of
// `chunk_size` within the budget; when the budget does not reach the next multiple, the prefix
// up to it (at most `chunk_size` tokens, so the split stays on the grid). Then the rule above: a
// run of 2 or more tokens that ends off the grid stops at the last grid point strictly inside it.
// `budget` < 1 counts as 1 and `chunk_size` < 1 as 1.
inline int64_t ChunkGridTokens(int64_t position, int64_t pending, int64_t budget,
                               int64_t chunk_size) {
  budget = std::max<int64_t>(budget, 1);
  const int64_t c = std::max<int64_t>(chunk_size, 1);
  int64_t n = std::max<int64_t>(pending, 0);
  if (pending > budget) {
    int64_t end = ((position + budget) / c) * c;
    if (end <= position) end = (position / c + 1) * c;
    n = std::min(pending, end - position);
  }
  if (n >= 2) {
    const int64_t last = LastGridPoint(position + n, c);
    if (last > position && last < position + n) n = last - position;
  }
  return n;
}

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_STEP_PLAN_H_
