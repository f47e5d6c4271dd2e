// SplitSequences (engine/runtime/batch_split.h): which steps are divided among the threads, and
// where.
#include "engine/runtime/batch_split.h"

#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

// row_start for sequences of these row counts.
std::vector<int64_t> Starts(const std::vector<int64_t>& rows) {
  std::vector<int64_t> s{0};
  for (int64_t r : rows) s.push_back(s.back() + r);
  return s;
}

using Cuts = std::vector<size_t>;

TEST(SplitSequences, DecodeRowsDivideEvenlyOnceEveryThreadHasEnough) {
  EXPECT_EQ(SplitSequences(Starts(std::vector<int64_t>(32, 1)), 2), (Cuts{0, 16, 32}));
  EXPECT_EQ(SplitSequences(Starts(std::vector<int64_t>(33, 1)), 2), (Cuts{0, 16, 33}));
  EXPECT_EQ(SplitSequences(Starts(std::vector<int64_t>(48, 1)), 3), (Cuts{0, 16, 32, 48}));
  // One row short of kMinSplitRowsPerThread per thread: the pool runs each op.
  EXPECT_EQ(SplitSequences(Starts(std::vector<int64_t>(31, 1)), 2), Cuts{});
  EXPECT_EQ(SplitSequences(Starts(std::vector<int64_t>(47, 1)), 3), Cuts{});
}

TEST(SplitSequences, OneThreadOrAnEmptyBatchNeverSplits) {
  EXPECT_EQ(SplitSequences(Starts(std::vector<int64_t>(64, 1)), 1), Cuts{});
  EXPECT_EQ(SplitSequences(Starts(std::vector<int64_t>(64, 1)), 0), Cuts{});
  EXPECT_EQ(SplitSequences({0}, 2), Cuts{});
  EXPECT_EQ(SplitSequences({}, 2), Cuts{});
}

TEST(SplitSequences, CutsFallOnTheSequenceBoundaryNearestTheEvenShare) {
  // 40 rows, even share 20: boundaries at 10, 20, 30.
  EXPECT_EQ(SplitSequences(Starts({10, 10, 10, 10}), 2), (Cuts{0, 2, 4}));
  // 32 rows, even share 16: boundaries at 15 and 17 are as near; the later one is taken.
  EXPECT_EQ(SplitSequences(Starts({15, 2, 15}), 2), (Cuts{0, 2, 3}));
  // 32 rows: boundary 14 is nearer to 16 than 19.
  EXPECT_EQ(SplitSequences(Starts({14, 5, 13}), 2), (Cuts{0, 1, 3}));
}

TEST(SplitSequences, SharesMoreThanAQuarterPastTheEvenOneRunWhole) {
  // 32 rows: a 20-row share is a quarter past 16 and still splits; 21 does not.
  EXPECT_EQ(SplitSequences(Starts({20, 12}), 2), (Cuts{0, 1, 2}));
  EXPECT_EQ(SplitSequences(Starts({21, 11}), 2), Cuts{});
  // One long prefill beside a few decode rows.
  std::vector<int64_t> rows{512};
  rows.insert(rows.end(), 31, 1);
  EXPECT_EQ(SplitSequences(Starts(rows), 2), Cuts{});
  // Fewer sequences than threads.
  EXPECT_EQ(SplitSequences(Starts({40, 40}), 3), Cuts{});
}

TEST(SplitSequences, EverySequenceIsInExactlyOneShareInOrder) {
  std::vector<int64_t> rows;
  for (int i = 0; i < 90; ++i) rows.push_back(1 + i % 4);
  for (int threads = 2; threads <= 8; ++threads) {
    const Cuts cuts = SplitSequences(Starts(rows), threads);
    ASSERT_EQ(cuts.size(), static_cast<size_t>(threads) + 1) << threads;
    EXPECT_EQ(cuts.front(), 0u);
    EXPECT_EQ(cuts.back(), rows.size());
    for (size_t g = 0; g + 1 < cuts.size(); ++g) EXPECT_LT(cuts[g], cuts[g + 1]);
  }
}

}  // namespace
}  // namespace flatstate
