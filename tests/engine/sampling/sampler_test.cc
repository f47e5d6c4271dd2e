#include "engine/sampling/sampler.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> Draw(const std::vector<float>& logits, const SamplingParams& p, int n) {
  Rng rng(p.seed);
  std::vector<std::pair<float, int32_t>> scratch;
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(SampleToken(logits.data(), static_cast<int>(logits.size()), p, &rng, &scratch));
  }
  return out;
}

std::vector<float> RandomLogits(int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(vocab);
  for (float& x : v) x = 8.f * rng.Uniform() - 4.f;
  return v;
}

TEST(RngTest, SeedIsDeterministicAndUniformInRange) {
  Rng a(42), b(42), c(43);
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a == c);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(a.Next(), b.Next());
    const float u = c.Uniform();
    EXPECT_GE(u, 0.f);
    EXPECT_LT(u, 1.f);
  }
}

TEST(RngTest, StateRoundTrips) {
  Rng a(7);
  a.Next();
  Rng b;
  b.set_state(a.state());
  EXPECT_EQ(a.Next(), b.Next());
}

TEST(SamplerTest, GreedyPicksArgmaxWithoutTouchingRng) {
  std::vector<float> logits = {0.1f, 3.f, -2.f, 2.9f};
  SamplingParams p;  // temperature 0
  Rng rng(5);
  const Rng before = rng;
  std::vector<std::pair<float, int32_t>> scratch;
  EXPECT_EQ(SampleToken(logits.data(), 4, p, &rng, &scratch), 1);
  EXPECT_EQ(rng, before);
}

TEST(SamplerTest, GreedyTakesLowestIndexOnTies) {
  std::vector<float> logits = {1.f, 5.f, 2.f, 5.f, 5.f};
  SamplingParams p;
  Rng rng(1);
  std::vector<std::pair<float, int32_t>> scratch;
  EXPECT_EQ(SampleToken(logits.data(), 5, p, &rng, &scratch), 1);
}

TEST(SamplerTest, SameSeedSameSequence) {
  const auto logits = RandomLogits(256, 3);
  SamplingParams p{.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 1234};
  EXPECT_EQ(Draw(logits, p, 200), Draw(logits, p, 200));
  p.top_k = 40;
  p.top_p = 0.9f;
  EXPECT_EQ(Draw(logits, p, 200), Draw(logits, p, 200));
}

TEST(SamplerTest, DifferentSeedsDiffer) {
  const auto logits = RandomLogits(256, 3);
  SamplingParams p{.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 1};
  SamplingParams q = p;
  q.seed = 2;
  EXPECT_NE(Draw(logits, p, 200), Draw(logits, q, 200));
}

TEST(SamplerTest, TopKOneEqualsGreedy) {
  for (uint64_t s = 0; s < 20; ++s) {
    auto logits = RandomLogits(256, s);
    logits[17] = logits[200] = 10.f;  // a tie: lowest index wins
    SamplingParams greedy;
    SamplingParams k1{.temperature = 1.5f, .top_k = 1, .top_p = 1.f, .seed = s};
    const auto g = Draw(logits, greedy, 1)[0];
    EXPECT_EQ(g, 17);
    for (int32_t t : Draw(logits, k1, 50)) EXPECT_EQ(t, g);
  }
}

TEST(SamplerTest, TinyTopPEqualsGreedy) {
  for (uint64_t s = 0; s < 20; ++s) {
    const auto logits = RandomLogits(256, 100 + s);
    SamplingParams greedy;
    SamplingParams tiny{.temperature = 1.f, .top_k = 0, .top_p = 1e-6f, .seed = s};
    const auto g = Draw(logits, greedy, 1)[0];
    for (int32_t t : Draw(logits, tiny, 50)) EXPECT_EQ(t, g);
  }
}

TEST(SamplerTest, TopKRestrictsSupport) {
  std::vector<float> logits = {0.f, 1.f, 2.f, 3.f, 4.f, 5.f};
  SamplingParams p{.temperature = 5.f, .top_k = 2, .top_p = 1.f, .seed = 9};
  for (int32_t t : Draw(logits, p, 500)) EXPECT_TRUE(t == 4 || t == 5) << t;
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingMass) {
  // Probabilities 0.5, 0.3, 0.2 (as logs). top_p 0.7 keeps {0, 1}; top_p 0.5 keeps {0}.
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p{.temperature = 1.f, .top_k = 0, .top_p = 0.7f, .seed = 4};
  bool saw1 = false;
  for (int32_t t : Draw(logits, p, 500)) {
    EXPECT_NE(t, 2);
    saw1 |= t == 1;
  }
  EXPECT_TRUE(saw1);
  p.top_p = 0.5f;
  for (int32_t t : Draw(logits, p, 200)) EXPECT_EQ(t, 0);
}

TEST(SamplerTest, FrequenciesMatchSoftmax) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> logits;
  for (double q : probs) logits.push_back(static_cast<float>(std::log(q)) + 7.f);
  SamplingParams p{.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 2024};
  constexpr int kDraws = 20000;
  std::vector<int> counts(4, 0);
  for (int32_t t : Draw(logits, p, kDraws)) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 4);
    ++counts[t];
  }
  double chi2 = 0;
  for (int i = 0; i < 4; ++i) {
    const double expected = probs[i] * kDraws;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  // 3 degrees of freedom: P(chi2 > 16.27) = 0.001.
  EXPECT_LT(chi2, 16.27) << counts[0] << " " << counts[1] << " " << counts[2] << " " << counts[3];
}

TEST(SamplerTest, TemperatureSharpens) {
  const std::vector<float> logits = {0.f, 1.f};
  SamplingParams cold{.temperature = 0.1f, .top_k = 0, .top_p = 1.f, .seed = 8};
  int ones = 0;
  for (int32_t t : Draw(logits, cold, 1000)) ones += t;
  EXPECT_GT(ones, 990);  // p(1) = 1 / (1 + e^-10)
}

TEST(SamplerTest, NanLogitsNeverSampled) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 0.f, nan, 0.f};
  SamplingParams p{.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 8};
  for (int32_t t : Draw(logits, p, 200)) EXPECT_TRUE(t == 1 || t == 3);
  EXPECT_EQ(Draw(logits, SamplingParams{}, 1)[0], 1);
}

TEST(SamplingParamsTest, Validation) {
  EXPECT_TRUE(ValidateSamplingParams({}).ok());
  EXPECT_TRUE(ValidateSamplingParams({.temperature = 0.7f, .top_k = 5, .top_p = 0.9f}).ok());

  auto bad = [](SamplingParams p, const char* field) {
    absl::Status s = ValidateSamplingParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(s.message()), HasSubstr(field));
  };
  bad({.temperature = -0.1f}, "sampling.temperature");
  bad({.temperature = std::numeric_limits<float>::quiet_NaN()}, "sampling.temperature");
  bad({.temperature = std::numeric_limits<float>::infinity()}, "sampling.temperature");
  bad({.top_p = 0.f}, "sampling.top_p");
  bad({.top_p = 1.01f}, "sampling.top_p");
  bad({.top_p = std::numeric_limits<float>::quiet_NaN()}, "sampling.top_p");
}

}  // namespace
}  // namespace flatstate
