// StepCostModel (engine/speculate/step_cost.h): medians per row count, interpolation and
// extrapolation of row counts never observed, drafting time, the streams' factor, and what it
// ignores.
#include "engine/speculate/step_cost.h"

#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

void ExpectCosts(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-9) << "k = " << k;
}

TEST(StepCostModel, NothingObservedGivesNoCosts) {
  StepCostModel m;
  EXPECT_TRUE(m.Costs(1, 1, 4).empty());
  EXPECT_EQ(m.StepSeconds(1), 0);
  // Invalid observations are ignored.
  m.ObserveStep(0, 1.0);
  m.ObserveStep(StepCostModel::kMaxRows + 1, 1.0);
  m.ObserveStep(3, 0.0);
  m.ObserveStep(3, -1.0);
  EXPECT_TRUE(m.Costs(1, 1, 4).empty());
}

TEST(StepCostModel, OneRowCountObserved) {
  StepCostModel m;
  m.ObserveStep(1, 0.010);
  // More rows than seen: as the largest seen until measured (a draft looks free, so one is tried).
  ExpectCosts(m.Costs(1, 1, 3), {1, 1, 1, 1});
  // Only a 6-row step seen: more rows cost what it did, fewer their share.
  StepCostModel six;
  six.ObserveStep(6, 0.030);
  EXPECT_NEAR(six.StepSeconds(8), 0.030, 1e-12);
  EXPECT_NEAR(six.StepSeconds(2), 0.010, 1e-12);
  EXPECT_NEAR(six.StepSeconds(1), 0.005, 1e-12);
}

TEST(StepCostModel, FromOneRowToOneCountSeenThenALineThroughAll) {
  StepCostModel m;
  m.ObserveStep(1, 0.010);
  m.ObserveStep(3, 0.014);
  // T(2) = 12 ms between; T(4), T(5) as T(3) until seen.
  ExpectCosts(m.Costs(1, 1, 4), {1, 1.2, 1.4, 1.4, 1.4});
  // Two streams wait for the longer step: the extra time counts twice.
  ExpectCosts(m.Costs(1, 2, 2), {1, 1.4, 1.8});
  // Drafting time adds per drafted token: 1 ms a token.
  m.ObserveDraft(4, 0.004);
  ExpectCosts(m.Costs(1, 1, 2), {1, 1.3, 1.6});
  // From a base of 3 rows: one more row is unseen (free), its drafting is not.
  ExpectCosts(m.Costs(3, 1, 1), {1, 1 + 0.001 / 0.014});
  // More counts seen: the least-squares line through their medians (here exactly 1 ms a row).
  m.ObserveStep(2, 0.014);
  m.ObserveStep(3, 0.015);  // the median of 14 and 15 ms is taken as the upper one
  m.ObserveStep(6, 0.018);
  ExpectCosts(m.Costs(1, 1, 5), {1, 1.5, 1.7, 1.9, 2.1, 2.3});  // (T(1 + k) - 10 + k) / 10
}

TEST(StepCostModel, TheLineKeepsOneNoisyCountFromDecidingLongDrafts) {
  StepCostModel m;
  m.ObserveStep(1, 0.010);
  m.ObserveStep(2, 0.020);
  m.ObserveStep(3, 0.040);  // a slow step, seen once
  for (int i = 0; i < 3; ++i) {
    m.ObserveStep(4, 0.021);
    m.ObserveStep(5, 0.022);
    m.ObserveStep(6, 0.023);
  }
  // A line through (2, 20) and (3, 40) alone would put 6 rows at 100 ms; the fit over all five
  // counts stays near what 6 rows cost.
  EXPECT_LT(m.StepSeconds(6), 0.030);
  EXPECT_GE(m.StepSeconds(6), 0.010);
}

TEST(StepCostModel, ASlowFirstStepOfACountDecidesNothingOnceAnotherIsSettled) {
  StepCostModel m;
  for (int i = 0; i < 5; ++i) m.ObserveStep(1, 0.010);
  m.ObserveStep(6, 0.200);  // the first 6-row step pays one-time costs
  // Seen alone, it decides (nothing else has been measured): k = 5 costs 20 plain steps.
  EXPECT_NEAR(m.Costs(1, 1, 5)[5], 20.0, 1e-9);
  for (int i = 0; i < StepCostModel::kSettled - 1; ++i) m.ObserveStep(2, 0.013);
  EXPECT_GT(m.Costs(1, 1, 5)[5], 2.0);  // 2 rows not settled yet: still the line through both
  m.ObserveStep(2, 0.013);
  // 2 rows settled: the line is through them alone, and 6 rows cost what 2 do until they are
  // tried again (so a pacer tries them)...
  ExpectCosts(m.Costs(1, 1, 5), {1, 1.3, 1.3, 1.3, 1.3, 1.3});
  // ...and once 6 rows are settled too, their median counts (the slow first step outvoted).
  for (int i = 0; i < StepCostModel::kSettled - 1; ++i) m.ObserveStep(6, 0.018);
  EXPECT_NEAR(m.StepSeconds(6), 0.018, 1e-12);
  EXPECT_NEAR(m.Costs(1, 1, 5)[5], 1.8, 1e-9);
}

TEST(StepCostModel, BelowTheRangeNeverLessThanProportional) {
  StepCostModel m;
  m.ObserveStep(2, 0.012);
  m.ObserveStep(4, 0.016);
  EXPECT_NEAR(m.StepSeconds(1), 0.010, 1e-12);  // the line: 12 - 2
  StepCostModel steep;
  steep.ObserveStep(2, 0.010);
  steep.ObserveStep(3, 0.019);
  EXPECT_NEAR(steep.StepSeconds(1), 0.005, 1e-12);  // the line gives 1 ms; rows' share is 5
}

TEST(StepCostModel, AMedianIgnoresAnOutlierAndFollowsTheRecentWindow) {
  StepCostModel m;
  m.ObserveStep(1, 0.010);
  for (int i = 0; i < StepCostModel::kWindow - 1; ++i) m.ObserveStep(2, 0.012);
  m.ObserveStep(2, 0.500);  // a preempted step
  EXPECT_NEAR(m.StepSeconds(2), 0.012, 1e-12);
  // The window moves on: the last kWindow observations only.
  for (int i = 0; i < StepCostModel::kWindow; ++i) m.ObserveStep(2, 0.015);
  EXPECT_NEAR(m.StepSeconds(2), 0.015, 1e-12);
}

TEST(StepCostModel, NoiseNeverMakesADraftLookFree) {
  StepCostModel m;
  m.ObserveStep(1, 0.012);
  m.ObserveStep(2, 0.010);  // a verification timed faster than a plain step
  ExpectCosts(m.Costs(1, 1, 1), {1, 1});
}

}  // namespace
}  // namespace flatstate
