// StepCostModel (engine/speculate/step_cost.h): medians per row count, interpolation and
// extrapolation of row counts never observed, drafting time, the streams' factor, and what it
// ignores.
#include "engine/speculate/step_cost.h"

#include <vector>

#include "engine/speculate/draft_pacer.h"
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

TEST(StepCostModel, OneRowCountObservedScalesByThePrior) {
  StepCostModel m;
  m.ObserveStep(1, 0.010);
  const double r = DraftPacer::kPriorRowCost;
  ExpectCosts(m.Costs(1, 1, 3), {1, 1 + r, 1 + 2 * r, 1 + 3 * r});
  EXPECT_NEAR(m.StepSeconds(3), 0.010 * (1 + 2 * r), 1e-12);
}

TEST(StepCostModel, InterpolatesBetweenAndExtrapolatesBeyondObservedCounts) {
  StepCostModel m;
  m.ObserveStep(1, 0.010);
  m.ObserveStep(3, 0.014);
  // T(2) = 12 ms between; T(4), T(5) along the line through 1 and 3 (2 ms a row).
  ExpectCosts(m.Costs(1, 1, 4), {1, 1.2, 1.4, 1.6, 1.8});
  // Two streams wait for the longer step: the extra time counts twice.
  ExpectCosts(m.Costs(1, 2, 2), {1, 1.4, 1.8});
  // Drafting time adds per drafted token: 1 ms a token.
  m.ObserveDraft(4, 0.004);
  ExpectCosts(m.Costs(1, 1, 2), {1, 1.3, 1.6});
  // From a base of 3 rows.
  ExpectCosts(m.Costs(3, 1, 1), {1, 1 + 0.003 / 0.014});
  // Beyond the range the line through the two largest counts.
  m.ObserveStep(4, 0.017);  // 3 ms a row between 3 and 4
  EXPECT_NEAR(m.StepSeconds(5), 0.020, 1e-12);
  // Capped by rows in proportion (no row costs more than its share of the largest observed step).
  StepCostModel steep;
  steep.ObserveStep(1, 0.010);
  steep.ObserveStep(2, 0.030);
  EXPECT_NEAR(steep.StepSeconds(3), 0.045, 1e-12);  // the line gives 50 ms
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
