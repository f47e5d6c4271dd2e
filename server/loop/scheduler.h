// Scheduler: decides one engine step of one model. Pure: no engine, no gRPC, no clock; the same
// input always gives the same plan. Thread-safe (immutable after construction); never fails.
//
// Input: the model's active streams in arrival order (tokens run, tokens pending, KV blocks held),
// the free KV blocks (softmax models), and the limits it was built with (step token budget,
// chunk size, KV block size). Output: one StreamStep per stream, in the same order.
//
// Token budget (what EngineLoop always did; outputs do not depend on it):
//  * a decoding stream (at most one pending token) runs it; decodes are planned first;
//  * prefilling streams, oldest first, share what is left of the budget: each runs
//    ChunkGridTokens(position, pending, max(left, 1), chunk size) (engine/runtime/step_plan.h, the
//    chunk grid the engine uses too), so a split never changes the floats; once the budget is
//    spent, further prefills get kNoBudget (with no decoding stream, a budget below 1 still runs
//    one prefill piece).
//
// KV blocks (softmax models; the arithmetic is KvBlockPool::BlocksNeeded), per stream, in the
// order above (vLLM's allocate_slots answers per request too):
//  * its run's new blocks fit in what is still free: kRun, and those blocks are taken;
//  * else, if the blocks it lacks exceed the free ones plus every block other throwaway sessions'
//    streams hold (`frees_kv_on_finish`: the only blocks that come back by themselves, when those
//    streams end), kKvExhausted: the caller ends it alone with RESOURCE_EXHAUSTED;
//  * else kWaitForKv: it keeps its place and tries again next step. Streams that wait hold their
//    blocks, so they can wait on each other: when no stream runs or ends in a step, the youngest
//    (latest to arrive) waiting one gets kKvExhausted instead (its blocks come back if its session
//    is throwaway). At least one stream runs or ends every step, so waiting never deadlocks.
// A prefill that cannot get its blocks leaves its share of the budget to the next one (decodes
// count one token each against the budget whether they run or not, as before).
#ifndef FLATSTATE_SERVER_LOOP_SCHEDULER_H_
#define FLATSTATE_SERVER_LOOP_SCHEDULER_H_

#include <cstdint>
#include <span>
#include <vector>

namespace flatstate::server {

// What the scheduler knows of one active stream.
struct StreamDemand {
  int64_t position = 0;             // tokens of its session already run
  int64_t pending = 0;              // tokens waiting to run
  int64_t kv_blocks_held = 0;       // softmax: blocks in its session's table
  bool frees_kv_on_finish = false;  // its session's blocks go back to the pool when it ends
};

enum class StreamAction {
  kRun,          // runs `tokens` tokens this step
  kNoBudget,     // prefill left for a later step: the token budget is spent
  kWaitForKv,    // lacks KV blocks now; streams that end will hand back enough
  kKvExhausted,  // lacks KV blocks that will not come back: end it (RESOURCE_EXHAUSTED)
};

struct StreamStep {
  StreamAction action = StreamAction::kNoBudget;
  int64_t tokens = 0;     // kRun: tokens it runs (pass as StepRequest::max_tokens)
  int64_t kv_blocks = 0;  // new KV blocks its run needs (kRun: taken from the free ones)
};

struct SchedulerLimits {
  int64_t step_token_budget = 512;  // tokens per step (decodes count one each); >= 1
  int64_t chunk_size = 64;          // the model's chunk grid
  int kv_block_size = 0;            // tokens per KV block; 0: the model has no paged KV
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerLimits& limits) : limits_(limits) {}

  // One step's plan for `streams` (arrival order) with `kv_blocks_free` free blocks (ignored
  // without paged KV). Result: one entry per stream, same order.
  std::vector<StreamStep> Plan(std::span<const StreamDemand> streams, int64_t kv_blocks_free) const;

  const SchedulerLimits& limits() const { return limits_; }

 private:
  SchedulerLimits limits_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_LOOP_SCHEDULER_H_
