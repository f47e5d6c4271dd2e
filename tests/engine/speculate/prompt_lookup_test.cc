// PromptLookupDrafter (engine/speculate/prompt_lookup.h): drafts continue the most recent earlier
// occurrence of the longest recurring suffix, never the suffix itself; limits; the pause after
// misses (fewer than kPaysOff tokens accepted) doubles and resets on a draft that pays off.
#include "engine/speculate/prompt_lookup.h"

#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

using Tokens = std::vector<int32_t>;

TEST(PromptLookupDrafter, ContinuesTheMostRecentEarlierOccurrence) {
  PromptLookupDrafter d({.max_draft = 4, .min_ngram = 2, .max_ngram = 3});
  d.Append(Tokens{1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2});
  // Suffix (1, 2): its most recent earlier occurrence ends at index 8 -> 3, 7, 8, 1.
  EXPECT_EQ(d.Draft(10), (Tokens{3, 7, 8, 1}));
  d.Append(Tokens{3});
  // Suffix (1, 2, 3) recurs twice; the later one (followed by 7, 8) wins.
  EXPECT_EQ(d.Draft(2), (Tokens{7, 8}));
  EXPECT_EQ(d.Draft(0), Tokens{});
}

TEST(PromptLookupDrafter, LongerSuffixesWinAndNothingRecursNoDraft) {
  PromptLookupDrafter d({.max_draft = 8, .min_ngram = 2, .max_ngram = 4});
  d.Append(Tokens{5, 6, 7, 1, 6, 7, 2, 9, 5, 6, 7});
  // (5, 6, 7) recurs once, followed by 1; (6, 7) alone would pick the later (6, 7) -> 2.
  EXPECT_EQ(d.Draft(3), (Tokens{1, 6, 7}));
  PromptLookupDrafter fresh({});
  fresh.Append(Tokens{1, 2, 3, 4, 5});
  EXPECT_TRUE(fresh.Draft(8).empty());
  // The draft stops at the end of the context.
  PromptLookupDrafter end({.max_draft = 8, .min_ngram = 1, .max_ngram = 2});
  end.Append(Tokens{4, 4});
  EXPECT_EQ(end.Draft(8), (Tokens{4}));
}

TEST(PromptLookupDrafter, MissesPauseDraftingLongerEachTime) {
  PromptLookupDrafter d({.max_draft = 2, .min_ngram = 1, .max_ngram = 1});
  d.Append(Tokens{1, 1, 1, 1});
  ASSERT_FALSE(d.Draft(2).empty());
  d.Feedback(2, 0);  // a complete miss: one step without drafts
  EXPECT_TRUE(d.Draft(2).empty());
  ASSERT_FALSE(d.Draft(2).empty());
  d.Feedback(2, 0);  // the second in a row: two steps
  EXPECT_TRUE(d.Draft(2).empty());
  EXPECT_TRUE(d.Draft(2).empty());
  ASSERT_FALSE(d.Draft(2).empty());
  d.Feedback(2, 2);  // paid off: the next miss pauses one step again
  ASSERT_FALSE(d.Draft(2).empty());
  d.Feedback(2, 0);
  EXPECT_TRUE(d.Draft(2).empty());
  EXPECT_FALSE(d.Draft(2).empty());
  // One token accepted of several does not pay for the verification: a miss (pause 2 now).
  d.Feedback(5, 1);
  EXPECT_TRUE(d.Draft(2).empty());
  EXPECT_TRUE(d.Draft(2).empty());
  EXPECT_FALSE(d.Draft(2).empty());
  // A one-token draft accepted whole pays off.
  d.Feedback(1, 1);
  d.Feedback(2, 0);
  EXPECT_TRUE(d.Draft(2).empty());
  EXPECT_FALSE(d.Draft(2).empty());
  // The pause never grows past kMaxPause.
  for (int i = 0; i < 20; ++i) {
    d.Feedback(1, 0);
    int empty = 0;
    while (d.Draft(2).empty()) ++empty;
    EXPECT_LE(empty, DraftPacer::kMaxPause);
  }
}

}  // namespace
}  // namespace flatstate
