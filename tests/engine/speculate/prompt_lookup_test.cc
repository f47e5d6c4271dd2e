// PromptLookupDrafter (engine/speculate/prompt_lookup.h): drafts continue the most recent earlier
// occurrence of the longest recurring suffix, never the suffix itself; limits; the length is
// DraftPacer's (draft_pacer_test.cc).
#include "engine/speculate/prompt_lookup.h"

#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

using Tokens = std::vector<int32_t>;

// Verification costing nothing: the pacer proposes the longest draft it may.
const std::vector<double> kFree(17, 1.0);

TEST(PromptLookupDrafter, ContinuesTheMostRecentEarlierOccurrence) {
  PromptLookupDrafter d({.max_draft = 4, .min_ngram = 2, .max_ngram = 3});
  d.Append(Tokens{1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2});
  // Suffix (1, 2): its most recent earlier occurrence ends at index 8 -> 3, 7, 8, 1.
  EXPECT_EQ(d.Draft(10, kFree), (Tokens{3, 7, 8, 1}));
  d.Append(Tokens{3});
  // Suffix (1, 2, 3) recurs twice; the later one (followed by 7, 8) wins.
  EXPECT_EQ(d.Draft(2, kFree), (Tokens{7, 8}));
  EXPECT_EQ(d.Draft(0, kFree), Tokens{});
}

TEST(PromptLookupDrafter, LongerSuffixesWinAndNothingRecursNoDraft) {
  PromptLookupDrafter d({.max_draft = 8, .min_ngram = 2, .max_ngram = 4});
  d.Append(Tokens{5, 6, 7, 1, 6, 7, 2, 9, 5, 6, 7});
  // (5, 6, 7) recurs once, followed by 1; (6, 7) alone would pick the later (6, 7) -> 2.
  EXPECT_EQ(d.Draft(3, kFree), (Tokens{1, 6, 7}));
  PromptLookupDrafter fresh({});
  fresh.Append(Tokens{1, 2, 3, 4, 5});
  EXPECT_TRUE(fresh.Draft(8, kFree).empty());
  // The draft stops at the end of the context.
  PromptLookupDrafter end({.max_draft = 8, .min_ngram = 1, .max_ngram = 2});
  end.Append(Tokens{4, 4});
  EXPECT_EQ(end.Draft(8, kFree), (Tokens{4}));
}

TEST(PromptLookupDrafter, ThePacerDecidesTheLength) {
  PromptLookupDrafter d({.max_draft = 6, .min_ngram = 1, .max_ngram = 1});
  d.Append(Tokens{1, 2, 3, 4, 5, 6, 7, 1});  // (1) recurs: 2 .. 7 may follow
  // Unmeasured costs and the prior acceptance: two tokens (DraftPacer's test has the arithmetic).
  EXPECT_EQ(d.Draft(6, {}).size(), 2u);
  // Verification dearer than any draft can pay for: none (a pause).
  const std::vector<double> dear = {1, 3, 5, 7, 9, 11, 13};
  EXPECT_TRUE(d.Draft(6, dear).empty());
}

}  // namespace
}  // namespace flatstate
