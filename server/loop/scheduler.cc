#include "server/loop/scheduler.h"

#include <algorithm>

#include "engine/kv/kv_block_pool.h"
#include "engine/runtime/step_plan.h"

namespace flatstate::server {

std::vector<StreamStep> Scheduler::Plan(std::span<const StreamDemand> streams,
                                        int64_t kv_blocks_free) const {
  std::vector<StreamStep> plan(streams.size());
  const bool paged = limits_.kv_block_size > 0;
  int64_t free_blocks = std::max<int64_t>(kv_blocks_free, 0);
  std::vector<size_t> blocked;  // streams whose run did not fit in the free blocks
  // Runs stream i with `tokens` tokens if its new KV blocks fit; false if they do not.
  auto admit = [&](size_t i, int64_t tokens) {
    const StreamDemand& d = streams[i];
    StreamStep& p = plan[i];
    p.tokens = tokens;
    p.kv_blocks = paged ? KvBlockPool::BlocksNeeded(d.kv_blocks_held, d.position + tokens,
                                                    limits_.kv_block_size)
                        : 0;
    if (p.kv_blocks > free_blocks) {
      blocked.push_back(i);
      return false;
    }
    free_blocks -= p.kv_blocks;
    p.action = StreamAction::kRun;
    return true;
  };

  int64_t decodes = 0;
  for (const StreamDemand& d : streams) decodes += d.pending <= 1 ? 1 : 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    const StreamDemand& d = streams[i];
    if (d.pending <= 1) admit(i, ChunkGridTokens(d.position, d.pending, 1, limits_.chunk_size));
  }
  int64_t budget = limits_.step_token_budget - decodes;
  bool any_prefill = false;
  for (size_t i = 0; i < streams.size(); ++i) {  // oldest first
    const StreamDemand& d = streams[i];
    if (d.pending <= 1) continue;
    if (budget <= 0 && (any_prefill || decodes > 0)) break;  // the rest: kNoBudget
    const int64_t n = ChunkGridTokens(d.position, d.pending, budget, limits_.chunk_size);
    if (admit(i, n)) {
      budget -= n;
      any_prefill = true;
    }
  }

  // Blocks that come back by themselves: those of throwaway sessions, freed when their stream
  // ends (counting what a running one takes this step).
  int64_t throwaway_blocks = 0;
  bool progress = false;  // some stream runs or ends this step
  for (size_t i = 0; i < streams.size(); ++i) {
    if (plan[i].action == StreamAction::kRun) progress = true;
    if (streams[i].frees_kv_on_finish) {
      throwaway_blocks += streams[i].kv_blocks_held +
                          (plan[i].action == StreamAction::kRun ? plan[i].kv_blocks : 0);
    }
  }
  int64_t youngest_waiting = -1;
  for (size_t i : blocked) {
    const int64_t others =
        throwaway_blocks - (streams[i].frees_kv_on_finish ? streams[i].kv_blocks_held : 0);
    plan[i].tokens = 0;
    if (plan[i].kv_blocks > free_blocks + others) {
      plan[i].action = StreamAction::kKvExhausted;
      progress = true;
    } else {
      plan[i].action = StreamAction::kWaitForKv;
      youngest_waiting = std::max(youngest_waiting, static_cast<int64_t>(i));
    }
  }
  // Nothing runs and nothing ends: the waiting streams wait on each other. End the youngest.
  if (!progress && youngest_waiting >= 0) {
    plan[youngest_waiting].action = StreamAction::kKvExhausted;
  }
  return plan;
}

}  // namespace flatstate::server
