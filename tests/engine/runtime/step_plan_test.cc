// ChunkGridTokens: budget splits on the chunk grid, and a run ending off the grid stops at the
// last grid point inside it, so every split of a prompt runs the same pieces.
#include "engine/runtime/step_plan.h"

#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

// The pieces a prompt of `n` tokens runs in, starting at `position`, with `budget` per step.
std::vector<int64_t> Pieces(int64_t position, int64_t n, int64_t budget, int64_t chunk) {
  std::vector<int64_t> ends;
  while (n > 0) {
    const int64_t k = ChunkGridTokens(position, n, budget, chunk);
    EXPECT_GT(k, 0);
    if (k <= 0) break;
    position += k;
    n -= k;
    ends.push_back(position);
  }
  return ends;
}

TEST(StepPlan, LastGridPoint) {
  EXPECT_EQ(LastGridPoint(0, 16), 0);
  EXPECT_EQ(LastGridPoint(15, 16), 0);
  EXPECT_EQ(LastGridPoint(16, 16), 16);
  EXPECT_EQ(LastGridPoint(47, 16), 32);
  EXPECT_EQ(LastGridPoint(5, 0), 5);  // chunk < 1 counts as 1
}

TEST(StepPlan, APromptThatFitsStopsAtItsLastGridPoint) {
  EXPECT_EQ(ChunkGridTokens(0, 300, 512, 64), 256);
  EXPECT_EQ(ChunkGridTokens(256, 44, 512, 64), 44);  // the rest: no grid point inside
  EXPECT_EQ(ChunkGridTokens(0, 256, 512, 64), 256);  // ends on the grid: runs whole
  EXPECT_EQ(ChunkGridTokens(0, 63, 512, 64), 63);
  EXPECT_EQ(ChunkGridTokens(60, 10, 512, 64), 4);  // crosses 64
  EXPECT_EQ(ChunkGridTokens(64, 1, 512, 64), 1);
  EXPECT_EQ(ChunkGridTokens(5, 0, 512, 64), 0);
}

TEST(StepPlan, BudgetSplitsStayOnTheGrid) {
  EXPECT_EQ(ChunkGridTokens(0, 300, 100, 64), 64);
  EXPECT_EQ(ChunkGridTokens(4, 40, 0, 16), 12);  // the budget does not reach the next point
  EXPECT_EQ(ChunkGridTokens(3, 50, 7, 16), 13);
}

TEST(StepPlan, EveryBudgetEndsThePromptWithTheSamePiece) {
  // Whatever the budget, the last piece of the prompt is [last grid point, end): the same rows
  // run in the same form, so the floats do not depend on the budget.
  for (int64_t n : {1, 2, 63, 64, 65, 129, 300, 1000}) {
    for (int64_t budget : {1, 7, 64, 100, 512, 1 << 20}) {
      const auto ends = Pieces(0, n, budget, 64);
      ASSERT_FALSE(ends.empty());
      EXPECT_EQ(ends.back(), n);
      const int64_t last = LastGridPoint(n - 1, 64);
      if (last > 0 && n % 64 != 0) {
        ASSERT_GE(ends.size(), 2u);
        EXPECT_EQ(ends[ends.size() - 2], LastGridPoint(n, 64)) << n << " " << budget;
      }
      for (size_t i = 0; i + 1 < ends.size(); ++i) EXPECT_EQ(ends[i] % 64, 0) << n;
    }
  }
}

}  // namespace
}  // namespace flatstate
