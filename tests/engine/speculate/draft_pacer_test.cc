// DraftPacer (engine/speculate/draft_pacer.h): the length that maximises the expected tokens per
// unit of cost, the acceptance estimate it rests on (per outcome of the last draft), pauses
// (doubling, capped, reset, never shorter than the probe budget allows) when no draft pays, and the
// probes after each pause (one token, then, if it was kept, the best length at the estimate).
#include "engine/speculate/draft_pacer.h"

#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

// cost[k] = 1 + row * k, k = 0..n.
std::vector<double> Linear(double row, int n = 16) {
  std::vector<double> c;
  for (int k = 0; k <= n; ++k) c.push_back(1 + row * k);
  return c;
}

// Drafts proposed over `steps` steps while every draft is refused whole.
int DraftsWhileAllRefused(DraftPacer* p, int steps, const std::vector<double>& cost) {
  int drafts = 0;
  for (int i = 0; i < steps; ++i) {
    if (const int k = p->Next(8, cost); k > 0) {
      ++drafts;
      p->Feedback(k, 0);
    }
  }
  return drafts;
}

TEST(DraftPacer, ProposesTheLengthWithTheMostExpectedTokensPerCost) {
  DraftPacer p(8);
  EXPECT_DOUBLE_EQ(p.acceptance(), 0.7);
  // p = 0.7, a row 0.35 of a step (the prior): E(k) / (1 + 0.35 k) is 1.259, 1.288, 1.236 for
  // k = 1, 2, 3.
  EXPECT_EQ(p.Next(8, {}), 2);
  EXPECT_EQ(p.Next(8, Linear(DraftPacer::kPriorRowCost)), 2);
  // Free verification: the longest allowed, within limit and max_draft.
  EXPECT_EQ(p.Next(8, Linear(0)), 8);
  EXPECT_EQ(p.Next(3, Linear(0)), 3);
  EXPECT_EQ(DraftPacer(4).Next(8, Linear(0)), 4);
  EXPECT_EQ(p.Next(0, Linear(0)), 0);
  // Cheap rows: longer; dear rows: shorter.
  EXPECT_EQ(p.Next(8, Linear(0.1)), 4);  // E(k) / (1 + 0.1 k): 2.77 / 1.4 = 1.98 is the best
  EXPECT_EQ(p.Next(8, Linear(0.5)), 1);  // 1.7 / 1.5 = 1.13 beats 2.19 / 2.0
  // Past the cost vector's end the prior row cost applies.
  EXPECT_EQ(p.Next(8, std::vector<double>{1.0}), 2);
}

TEST(DraftPacer, AcceptanceCountsKeptTokensOverTriedOnes) {
  DraftPacer p(8);
  for (int i = 0; i < 100; ++i) p.Feedback(4, 2);  // 2 kept, the third refused: 2 of 3
  EXPECT_NEAR(p.acceptance(), 2.0 / 3, 1e-6);
  for (int i = 0; i < 100; ++i) p.Feedback(4, 4);  // kept whole: 4 of 4
  EXPECT_GT(p.acceptance(), 0.999);
  EXPECT_EQ(p.Next(8, Linear(0.3)), 8);  // E(8) = 9 for 3.4: drafting pays most at the longest
  for (int i = 0; i < 100; ++i) p.Feedback(3, 0);
  EXPECT_LT(p.acceptance(), 1e-6);
  // The estimate follows recent drafts: four kept whole after those refusals lift it past 0.5.
  for (int i = 0; i < 4; ++i) p.Feedback(4, 4);
  EXPECT_GT(p.acceptance(), 0.5);
  p.Feedback(4, 9);  // accepted is clamped to drafted
  EXPECT_LE(p.acceptance(), 1.0);
}

TEST(DraftPacer, AcceptanceIsEstimatedPerOutcomeOfTheLastDraft) {
  // Bursts: runs of drafts kept whole, then runs refused. Drafts after a whole one are kept
  // (but the first after a run's end), drafts after a refused one refused (but the first of a run).
  DraftPacer p(8);
  for (int run = 0; run < 30; ++run) {
    for (int i = 0; i < 5; ++i) p.Feedback(4, 4);
    for (int i = 0; i < 5; ++i) p.Feedback(4, 0);
  }
  // After a refused draft: the rate of drafts that followed refused ones (mostly refused).
  EXPECT_LT(p.acceptance(), 0.5);
  DraftPacer after_refused = p;  // a copy, so its pause does not hold up p below
  EXPECT_EQ(after_refused.Next(8, Linear(0.6)), 0);
  p.Feedback(4, 4);
  // After one kept whole: the rate of drafts that followed whole ones (mostly kept), so drafting
  // pays even where a verified row costs 0.6 of a step. One rate for every draft would be about
  // 0.5 (half the tokens tried are kept) at both points: E(1) / cost[1] = 1.5 / 1.6, a pause.
  EXPECT_GT(p.acceptance(), 0.8);
  EXPECT_GT(p.Next(8, Linear(0.6)), 0);
}

TEST(DraftPacer, DraftsOnlyWhileTheExpectedGainBeatsTheCost) {
  // p = 0.5 (one of two kept, then refused): E(1) = 1.5.
  DraftPacer p(8);
  for (int i = 0; i < 100; ++i) p.Feedback(2, 1);
  ASSERT_NEAR(p.acceptance(), 0.5, 1e-6);
  // Drafting needs kMinGain (1.1): 1.5 / 1.3 = 1.15 does; 1.5 / 1.4 = 1.07 (and 1.75 / 1.9 for
  // k = 2, 1.875 / 2.35, the prior's 1.9375 / 2.4 past the vector) does not: a pause of one step,
  // then a probe.
  const std::vector<double> dear = {1, 1.4, 1.9, 2.35};
  EXPECT_EQ(p.Next(8, std::vector<double>{1, 1.3, 1.9, 2.35}), 1);
  EXPECT_EQ(p.Next(8, dear), 0);
  EXPECT_EQ(p.Next(8, dear), 1);  // the probe: one token, the cheapest look at the text
  // Refused: the next pause lasts ceil(0.4 / kProbeBudget) = 14 steps (not 2).
  p.Feedback(1, 0);
  for (int i = 0; i < 14; ++i) EXPECT_EQ(p.Next(8, dear), 0) << i;
  EXPECT_EQ(p.Next(8, dear), 1);
  // Free verification drafts whatever the estimate (--nopace_drafts): the longest.
  for (int i = 0; i < 100; ++i) p.Feedback(2, 0);
  EXPECT_EQ(p.Next(8, std::vector<double>(9, 1.0)), 8);
}

// The lengths of the pauses (steps without a draft) before each of the first `n` probes, every
// draft refused.
std::vector<int> PausesWhileAllRefused(DraftPacer* p, const std::vector<double>& cost, int n) {
  std::vector<int> pauses;
  int run = 0;
  for (int i = 0; i < 100000 && std::ssize(pauses) < n; ++i) {
    const int k = p->Next(8, cost);
    if (k == 0) {
      ++run;
      continue;
    }
    EXPECT_EQ(k, 1);  // a probe is one token
    pauses.push_back(run);
    run = 0;
    p->Feedback(k, 0);
  }
  return pauses;
}

TEST(DraftPacer, PausesDoubleToKMaxPauseWithAProbeAfterEachAndResetWhenDraftsPay) {
  DraftPacer p(8);
  for (int i = 0; i < 50; ++i) p.Feedback(2, 0);
  // Rows so cheap that a refused probe costs under kProbeBudget of one step, and yet no draft
  // pays at this acceptance: pauses of 1, 2, 4, ... steps, each followed by one probe.
  const std::vector<double> cheap = Linear(0.02);
  EXPECT_EQ(PausesWhileAllRefused(&p, cheap, 8), (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 64}));
  const std::vector<double> cost = Linear(0.4);
  // Probes that are kept raise the estimate until drafting pays again: then every step drafts,
  // and the next pause after a change of luck is one step again.
  int guard = 0;
  while (p.acceptance() < 0.6 && ++guard < 1000) {
    if (const int k = p.Next(8, cost); k > 0) p.Feedback(k, k);
  }
  ASSERT_LT(guard, 1000);
  for (int i = 0; i < 10; ++i) {
    const int k = p.Next(8, cost);
    ASSERT_GT(k, 0) << i;
    p.Feedback(k, k);
  }
  for (int i = 0; i < 50 && p.Next(8, cheap) > 0; ++i) p.Feedback(8, 0);
  EXPECT_GT(p.Next(8, cheap), 0);  // a pause of one step, then the probe
}

TEST(DraftPacer, AOneTokenProbeThatIsKeptIsFollowedAtOnceByTheBestLength) {
  DraftPacer p(8);
  for (int i = 0; i < 50; ++i) p.Feedback(2, 0);
  const std::vector<double> cost = Linear(0.9);  // rows so dear that no draft pays here
  int k = 0;
  while ((k = p.Next(8, cost)) == 0) {
  }
  ASSERT_EQ(k, 1);  // the first probe after a pause
  // Kept: a second probe at once, as long as pays best at the acceptance after kept drafts (the
  // prior 0.7 there, as only refused drafts were fed): 1.7 / 1.9 beats 2.19 / 2.8 ... at 0.9 a row.
  p.Feedback(1, 1);
  EXPECT_EQ(p.Next(8, cost), 1);
  p.Feedback(1, 1);  // kept again, but no draft pays at these costs: a pause, then one token
  EXPECT_EQ(p.Next(8, cost), 0);
  while ((k = p.Next(8, cost)) == 0) {
  }
  EXPECT_EQ(k, 1);
  p.Feedback(1, 0);  // refused: a pause, then one token again
  EXPECT_EQ(p.Next(8, cost), 0);
  while ((k = p.Next(8, cost)) == 0) {
  }
  EXPECT_EQ(k, 1);

  // Where drafts kept whole have been followed by kept ones (p ~ 1 after them: 9 / 8.2 = 1.098,
  // just short of kMinGain, so the pacer still pauses), the follow-up probe is the longest.
  DraftPacer q(8);
  for (int i = 0; i < 30; ++i) q.Feedback(8, 8);
  while ((k = q.Next(8, cost)) == 0) {
  }
  ASSERT_EQ(k, 1);
  q.Feedback(1, 1);
  EXPECT_EQ(q.Next(8, cost), 8);
  q.Feedback(8, 8);  // kept whole too, still short of kMinGain: a pause, then one token
  EXPECT_EQ(q.Next(8, cost), 0);
  while ((k = q.Next(8, cost)) == 0) {
  }
  EXPECT_EQ(k, 1);
}

TEST(DraftPacer, APauseAfterARefusedProbeIsLongEnoughThatTheNextCostsAtMostTheBudget) {
  // A row of 0.4 steps: the first pause (after refused drafts, no probe yet) is one step; after
  // each refused probe at least ceil(0.4 / 0.03) = 14 steps, then the doubling.
  DraftPacer p(8);
  for (int i = 0; i < 50; ++i) p.Feedback(2, 0);
  const std::vector<int> pauses = PausesWhileAllRefused(&p, Linear(0.4), 8);
  EXPECT_EQ(pauses, (std::vector<int>{1, 14, 14, 14, 16, 32, 64, 64}));
  for (size_t i = 1; i < pauses.size(); ++i) {
    EXPECT_LE(0.4 / (pauses[i] + 1), DraftPacer::kProbeBudget) << i;
  }
  // A row dearer than kMaxPause x kProbeBudget steps: kMaxPause after the first probe.
  DraftPacer q(8);
  for (int i = 0; i < 50; ++i) q.Feedback(2, 0);
  EXPECT_EQ(PausesWhileAllRefused(&q, Linear(3), 3), (std::vector<int>{1, 64, 64}));
  // Unmeasured (no cost vector): the prior row cost, ceil(0.35 / 0.03) = 12.
  DraftPacer r(8);
  for (int i = 0; i < 50; ++i) r.Feedback(2, 0);
  EXPECT_EQ(PausesWhileAllRefused(&r, {}, 3), (std::vector<int>{1, 12, 12}));
  // Kept probes lift the floor. Rows of 0.6: pauses of 1 and 0.6 / 0.03 = 20 steps (two refused
  // probes), a third pause (20 steps again; the doubling is at 8 after it), then a probe and its
  // follow-up kept, but no draft pays yet (p = 0.62 after kept drafts: E(1) / cost[1] = 1.62 /
  // 1.6): the next pause is the doubling's 8 steps, not 20.
  const std::vector<double> dear = Linear(0.6);
  DraftPacer s(8);
  for (int i = 0; i < 50; ++i) s.Feedback(2, 0);
  EXPECT_EQ(PausesWhileAllRefused(&s, dear, 2), (std::vector<int>{1, 20}));
  int k = 0;
  while ((k = s.Next(8, dear)) == 0) {
  }
  ASSERT_EQ(k, 1);
  s.Feedback(k, k);
  k = s.Next(8, dear);  // the follow-up
  ASSERT_GT(k, 0);
  s.Feedback(k, k);
  EXPECT_EQ(PausesWhileAllRefused(&s, dear, 1), std::vector<int>{8});
}

TEST(DraftPacer, TextWhereDraftsFailCostsAFewProbes) {
  // Over 2,000 steps of refused drafts, the pacer verifies a draft about once per kMaxPause
  // steps once the pause is long (the old pacer's ratio; the cost is what varies).
  DraftPacer p(8);
  const int drafts = DraftsWhileAllRefused(&p, 2000, Linear(0.35));
  EXPECT_LE(drafts, 2000 / DraftPacer::kMaxPause + 12);
  EXPECT_GE(drafts, 2000 / (DraftPacer::kMaxPause + 1));
}

}  // namespace
}  // namespace flatstate
