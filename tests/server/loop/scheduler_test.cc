// Scheduler unit tests: the token-budget rule, the chunk grid, and per-stream KV admission
// (run / wait / exhausted). No engine, no gRPC.
#include "server/loop/scheduler.h"

#include <vector>

#include "engine/runtime/step_plan.h"
#include "gtest/gtest.h"

namespace flatstate::server {
namespace {

StreamDemand Prefill(int64_t pending, int64_t position = 0, int64_t held = 0, bool frees = false) {
  return StreamDemand{position, pending, held, frees};
}
StreamDemand Decode(int64_t position, int64_t held = 0, bool frees = false) {
  return StreamDemand{position, 1, held, frees};
}

TEST(SchedulerTest, DecodesRunFirstAndPrefillsShareTheRestOnTheChunkGrid) {
  Scheduler s({/*step_token_budget=*/40, /*chunk_size=*/16, /*kv_block_size=*/0});
  const std::vector<StreamDemand> in = {Prefill(100), Decode(7), Prefill(50, 3)};
  const auto plan = s.Plan(in, 0);
  ASSERT_EQ(plan.size(), 3u);
  for (const StreamStep& p : plan) EXPECT_EQ(p.action, StreamAction::kRun);
  EXPECT_EQ(plan[1].tokens, 1);
  // 39 tokens left: the first prefill stops on the grid (32), the second gets 7 left, which does
  // not reach its next grid point (16), so it runs up to it: 13 tokens.
  EXPECT_EQ(plan[0].tokens, 32);
  EXPECT_EQ(plan[2].tokens, 13);
  EXPECT_EQ(plan[2].tokens, ChunkGridTokens(3, 50, 7, 16));
}

TEST(SchedulerTest, PromptThatFitsRunsToItsLastGridPoint) {
  Scheduler s({512, 64, 0});
  const auto plan = s.Plan(std::vector<StreamDemand>{Prefill(300, 5)}, 0);
  EXPECT_EQ(plan[0].action, StreamAction::kRun);
  EXPECT_EQ(plan[0].tokens, 251);  // up to its last grid point (256); the rest next step
}

TEST(SchedulerTest, SpentBudgetLeavesPrefillsForLater) {
  Scheduler s({2, 16, 0});
  const std::vector<StreamDemand> in = {Decode(1), Prefill(40), Decode(3), Prefill(9)};
  const auto plan = s.Plan(in, 0);
  EXPECT_EQ(plan[0].action, StreamAction::kRun);
  EXPECT_EQ(plan[2].action, StreamAction::kRun);
  EXPECT_EQ(plan[1].action, StreamAction::kNoBudget);
  EXPECT_EQ(plan[3].action, StreamAction::kNoBudget);
  EXPECT_EQ(plan[1].tokens, 0);
}

TEST(SchedulerTest, BudgetBelowOneStillRunsOnePrefillPiece) {
  Scheduler s({0, 16, 0});
  const auto plan = s.Plan(std::vector<StreamDemand>{Prefill(40, 4), Prefill(40)}, 0);
  EXPECT_EQ(plan[0].action, StreamAction::kRun);
  EXPECT_EQ(plan[0].tokens, 12);  // up to the next grid point
  EXPECT_EQ(plan[1].action, StreamAction::kNoBudget);
}

// Every budget splits a prompt on the same grid: the pieces always end on multiples of the chunk
// size (or at the end of the prompt).
TEST(SchedulerTest, PiecesEndOnTheGridWhateverTheBudget) {
  for (int64_t budget : {1, 5, 16, 17, 40, 1000}) {
    Scheduler s({budget, 16, 0});
    StreamDemand d = Prefill(100, 0);
    while (d.pending > 0) {
      const auto plan = s.Plan(std::vector<StreamDemand>{d}, 0);
      ASSERT_EQ(plan[0].action, StreamAction::kRun);
      ASSERT_GT(plan[0].tokens, 0);
      d.position += plan[0].tokens;
      d.pending -= plan[0].tokens;
      if (d.pending > 1) {
        EXPECT_EQ(d.position % 16, 0) << "budget " << budget;
      }
    }
  }
}

TEST(SchedulerTest, KvBlocksAreTakenInOrder) {
  Scheduler s({512, 16, /*kv_block_size=*/16});
  // Decode at position 16 holding 1 block needs 1 more; the prefill of 32 needs 2.
  const auto plan = s.Plan(std::vector<StreamDemand>{Decode(16, 1), Prefill(32)}, 3);
  EXPECT_EQ(plan[0].action, StreamAction::kRun);
  EXPECT_EQ(plan[0].kv_blocks, 1);
  EXPECT_EQ(plan[1].action, StreamAction::kRun);
  EXPECT_EQ(plan[1].kv_blocks, 2);
  // A decode inside its last block needs none.
  EXPECT_EQ(s.Plan(std::vector<StreamDemand>{Decode(5, 1)}, 0)[0].action, StreamAction::kRun);
}

TEST(SchedulerTest, StreamThatCannotGetBlocksEndsAloneIfNothingWillFreeThem) {
  Scheduler s({512, 16, 16});
  // Two decodes of named sessions (their blocks stay held) and a prompt whose first piece (to its
  // last grid point, 96) needs 6 blocks with 2 free: the prompt is exhausted, the decodes run.
  const std::vector<StreamDemand> in = {Decode(40, 3), Prefill(100), Decode(8, 1)};
  const auto plan = s.Plan(in, 2);
  EXPECT_EQ(plan[0].action, StreamAction::kRun);
  EXPECT_EQ(plan[2].action, StreamAction::kRun);
  EXPECT_EQ(plan[1].action, StreamAction::kKvExhausted);
  EXPECT_EQ(plan[1].kv_blocks, 6);
  EXPECT_EQ(plan[1].tokens, 0);
}

TEST(SchedulerTest, StreamWaitsForBlocksThatThrowawayStreamsWillFree) {
  Scheduler s({512, 16, 16});
  // The first stream is a throwaway session holding 5 blocks: they come back when it ends.
  const std::vector<StreamDemand> in = {Decode(70, 5, /*frees=*/true), Prefill(100)};
  const auto plan = s.Plan(in, 2);
  EXPECT_EQ(plan[0].action, StreamAction::kRun);
  EXPECT_EQ(plan[1].action, StreamAction::kWaitForKv);
  EXPECT_EQ(plan[1].kv_blocks, 6);
  // More than could ever come back: exhausted.
  const std::vector<StreamDemand> big = {Decode(70, 5, true), Prefill(200)};
  EXPECT_EQ(s.Plan(big, 2)[1].action, StreamAction::kKvExhausted);
}

TEST(SchedulerTest, StreamThatEndsIsProgressSoTheOthersWait) {
  Scheduler s({512, 16, 16});
  // Nothing fits. The first lacks a block that nothing gives back (the second holds none):
  // exhausted; ending it returns its 2 blocks, so the second waits for them.
  const std::vector<StreamDemand> in = {Decode(32, 2, true), Prefill(20, 0, 0, true)};
  const auto plan = s.Plan(in, 0);
  EXPECT_EQ(plan[0].action, StreamAction::kKvExhausted);
  EXPECT_EQ(plan[1].action, StreamAction::kWaitForKv);
}

TEST(SchedulerTest, WaitersThatWaitOnEachOtherLoseTheYoungest) {
  Scheduler s({512, 16, 16});
  // Each needs one block and each could get one from the other: nothing runs, nothing ends, so
  // the youngest ends.
  const std::vector<StreamDemand> in = {Decode(32, 2, true), Decode(48, 3, true)};
  const auto plan = s.Plan(in, 0);
  EXPECT_EQ(plan[0].action, StreamAction::kWaitForKv);
  EXPECT_EQ(plan[1].action, StreamAction::kKvExhausted);
}

TEST(SchedulerTest, YoungestMeansLatestToArriveNotLastPlanned) {
  Scheduler s({512, 16, 16});
  // Decodes are planned before prefills, but the stream that arrived last is the decode.
  const std::vector<StreamDemand> in = {Prefill(20, 0, 0, true), Decode(32, 2, true),
                                        Decode(48, 3, true)};
  const auto plan = s.Plan(in, 0);
  EXPECT_EQ(plan[0].action, StreamAction::kWaitForKv);
  EXPECT_EQ(plan[1].action, StreamAction::kWaitForKv);
  EXPECT_EQ(plan[2].action, StreamAction::kKvExhausted);
}

TEST(SchedulerTest, BlockedPrefillDoesNotUseTheBudget) {
  Scheduler s({40, 64, 16});
  // The first prompt's piece (up to the grid point 64: 4 blocks) cannot get its blocks; the
  // second gets the whole budget.
  const std::vector<StreamDemand> in = {Prefill(400), Prefill(39)};
  const auto plan = s.Plan(in, 3);
  EXPECT_EQ(plan[0].action, StreamAction::kKvExhausted);
  EXPECT_EQ(plan[1].action, StreamAction::kRun);
  EXPECT_EQ(plan[1].tokens, 39);
}

TEST(SchedulerTest, NoPagedKvNeverBlocks) {
  Scheduler s({512, 16, 0});
  const auto plan = s.Plan(std::vector<StreamDemand>{Prefill(100000), Decode(1 << 20)}, 0);
  EXPECT_EQ(plan[0].action, StreamAction::kRun);
  EXPECT_EQ(plan[1].action, StreamAction::kRun);
  EXPECT_EQ(plan[0].kv_blocks, 0);
}

}  // namespace
}  // namespace flatstate::server
