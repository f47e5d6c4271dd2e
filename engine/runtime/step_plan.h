// The chunk grid a step's prefill split must fall on, in one place: the engine (Engine::Step)
// and the server's scheduler (server/scheduler.h) both call ChunkGridTokens.
//
// The chunked linear-attention form puts its chunks on absolute multiples of the chunk size, so a
// prompt gives the same floats whatever the token budget only if every split of it ends on that
// grid. Pure function; thread-safe; never fails.
#ifndef FLATSTATE_ENGINE_RUNTIME_STEP_PLAN_H_
#define FLATSTATE_ENGINE_RUNTIME_STEP_PLAN_H_

#include <algorithm>
#include <cstdint>

namespace flatstate {

// How many of a session's `pending` tokens (it has run `position` tokens) a step with `budget`
// tokens runs: all of them if they fit; else the largest prefix that ends on a multiple of
// `chunk_size` within the budget; when the budget does not reach the next multiple, the prefix
// up to it (at most `chunk_size` tokens, so the split stays on the grid). `budget` < 1 counts as
// 1 and `chunk_size` < 1 as 1.
inline int64_t ChunkGridTokens(int64_t position, int64_t pending, int64_t budget,
                               int64_t chunk_size) {
  budget = std::max<int64_t>(budget, 1);
  if (pending <= budget) return std::max<int64_t>(pending, 0);
  const int64_t c = std::max<int64_t>(chunk_size, 1);
  int64_t end = ((position + budget) / c) * c;
  if (end <= position) end = (position / c + 1) * c;
  return std::min(pending, end - position);
}

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_STEP_PLAN_H_
