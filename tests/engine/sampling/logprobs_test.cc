// ComputeLogprobs (engine/sampling/logprobs.h): log-softmax of the raw logits at the sampled
// token and the top alternatives, as the HTTP API's logprobs report them.
#include "engine/sampling/logprobs.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

TEST(ComputeLogprobsTest, LogSoftmaxAtTheTokenAndTopKMostLikelyFirst) {
  const std::vector<float> logits = {1.f, 3.f, 2.f, 0.f};
  const double z = std::log(std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0));
  const TokenLogprobs lp = ComputeLogprobs(logits.data(), 4, /*token=*/2, /*top=*/3);
  EXPECT_EQ(lp.token, 2);
  EXPECT_NEAR(lp.logprob, 2.0 - z, 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 2);
  EXPECT_EQ(lp.top[2].first, 0);
  EXPECT_NEAR(lp.top[0].second, 3.0 - z, 1e-6);
  EXPECT_NEAR(lp.top[2].second, 1.0 - z, 1e-6);
  EXPECT_EQ(lp.top[1].second, lp.logprob);  // the same number for the same token
}

TEST(ComputeLogprobsTest, ProbabilitiesSumToOneAndAreShiftInvariant) {
  std::vector<float> logits = {-2.f, 0.5f, 7.f, 7.f, 1e-3f};
  double sum = 0;
  for (int t = 0; t < 5; ++t) sum += std::exp(ComputeLogprobs(logits.data(), 5, t, 0).logprob);
  EXPECT_NEAR(sum, 1.0, 1e-6);
  std::vector<float> shifted = logits;
  for (float& x : shifted) x += 1000.f;  // large logits must not overflow
  for (int t = 0; t < 5; ++t) {
    EXPECT_NEAR(ComputeLogprobs(shifted.data(), 5, t, 0).logprob,
                ComputeLogprobs(logits.data(), 5, t, 0).logprob, 1e-3);
  }
}

TEST(ComputeLogprobsTest, TiesGoToTheLowerIdAndTopIsClampedToTheVocabulary) {
  const std::vector<float> logits = {5.f, 5.f, 5.f};
  const TokenLogprobs lp = ComputeLogprobs(logits.data(), 3, 1, 10);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 0);
  EXPECT_EQ(lp.top[1].first, 1);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.logprob, -std::log(3.0), 1e-6);
  EXPECT_TRUE(ComputeLogprobs(logits.data(), 3, 1, 0).top.empty());
  EXPECT_TRUE(ComputeLogprobs(logits.data(), 3, 1, -1).top.empty());
}

TEST(ComputeLogprobsTest, NanCountsAsMinusInfinityAndOutOfRangeTokenKeepsZero) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 0.f, 0.f};
  const TokenLogprobs lp = ComputeLogprobs(logits.data(), 3, 0, 3);
  EXPECT_TRUE(std::isinf(lp.logprob) && lp.logprob < 0);
  EXPECT_NEAR(ComputeLogprobs(logits.data(), 3, 1, 0).logprob, -std::log(2.0), 1e-6);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[2].first, 0);  // NaN ranks last
  EXPECT_EQ(ComputeLogprobs(logits.data(), 3, 7, 0).logprob, 0.f);

  const std::vector<float> all_nan = {nan, nan};
  const TokenLogprobs none = ComputeLogprobs(all_nan.data(), 2, 0, 1);
  EXPECT_TRUE(std::isinf(none.logprob) && none.logprob < 0);
}

}  // namespace
}  // namespace flatstate
