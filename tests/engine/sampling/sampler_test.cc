#include "engine/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "engine/sampling/sampler_exp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> Draw(const std::vector<float>& logits, const SamplingParams& p, int n) {
  Rng rng(p.seed);
  SamplerScratch scratch;
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

// The sampler as first written: every token sorted by (logit desc, id asc), every weight exp'd
// (by SamplerExp, the sampler's own exp, since it replaced the C library's). SampleToken must give
// the same token and leave the rng in the same state on every input.
int32_t FullSortReference(const float* logits, int vocab, const SamplingParams& params, Rng* rng) {
  if (vocab <= 0) return 0;
  if (!(params.temperature > 0.f)) return SampleToken(logits, vocab, params, rng, nullptr);
  std::vector<std::pair<float, int32_t>> c(vocab);
  for (int i = 0; i < vocab; ++i) {
    const float x = logits[i];
    c[i] = {std::isnan(x) ? -std::numeric_limits<float>::infinity() : x, i};
  }
  auto before = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    if (a.first != b.first) return a.first > b.first;
    return a.second < b.second;
  };
  size_t kept = c.size();
  if (params.top_k > 0 && params.top_k < kept) {
    kept = params.top_k;
    std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(kept), c.end(), before);
  } else {
    std::sort(c.begin(), c.end(), before);
  }
  const double max_logit = c[0].first;
  if (!std::isfinite(max_logit)) return c[0].second;
  std::vector<double> w(kept);
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  double total = 0;
  for (size_t i = 0; i < kept; ++i) {
    w[i] = SamplerExp((static_cast<double>(c[i].first) - max_logit) * inv_t);
    total += w[i];
  }
  if (params.top_p < 1.f) {
    const double target = static_cast<double>(params.top_p) * total;
    double cum = 0;
    size_t n = 0;
    while (n < kept) {
      cum += w[n++];
      if (cum >= target) break;
    }
    kept = n;
    total = cum;
  }
  const double r = static_cast<double>(rng->Uniform()) * total;
  double cum = 0;
  for (size_t i = 0; i < kept; ++i) {
    cum += w[i];
    if (r < cum) return c[i].second;
  }
  return c[kept - 1].second;
}

// Logits shaped like a language model's: a few high, a long tail spread over `spread`, with
// repeated values (ties), signed zeros and, where asked, NaN and -inf.
std::vector<float> LmLikeLogits(int vocab, float spread, bool specials, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(vocab);
  for (float& x : v) {
    const float u = rng.Uniform();
    x = -spread * u * u;
    if (rng.Uniform() < 0.05f) x = std::round(x);  // ties
  }
  for (int i = 0; i < 5; ++i) v[rng.Next() % vocab] = 3.f * rng.Uniform();
  v[rng.Next() % vocab] = 0.f;
  v[rng.Next() % vocab] = -0.f;
  if (specials) {
    v[rng.Next() % vocab] = std::numeric_limits<float>::quiet_NaN();
    v[rng.Next() % vocab] = -std::numeric_limits<float>::infinity();
  }
  return v;
}

TEST(SamplerTest, SameTokensAndRngAsTheFullSortOnEveryShape) {
  SamplerScratch scratch;
  int cases = 0;
  for (int vocab : {1, 2, 7, 256, 257, 1000, 50257}) {
    for (float spread : {0.5f, 8.f, 60.f, 400.f}) {
      for (float temperature : {1e-3f, 0.3f, 0.8f, 1.f, 2.5f, 50.f}) {
        for (auto [top_k, top_p] : {std::pair<uint32_t, float>{0, 1.f},
                                    {40, 1.f},
                                    {0, 0.9f},
                                    {50, 0.95f},
                                    {100000, 0.5f},
                                    {1, 1.f}}) {
          const uint64_t seed = 1000u * static_cast<uint64_t>(cases) + 7u;
          const auto logits = LmLikeLogits(vocab, spread, cases % 3 == 0, seed);
          const SamplingParams p{temperature, top_k, top_p, seed};
          Rng fast(seed), ref(seed);
          const int draws = vocab > 1000 ? 3 : 20;
          for (int d = 0; d < draws; ++d) {
            ASSERT_EQ(SampleToken(logits.data(), vocab, p, &fast, &scratch),
                      FullSortReference(logits.data(), vocab, p, &ref))
                << "vocab " << vocab << " spread " << spread << " t " << temperature << " k "
                << top_k << " p " << top_p << " draw " << d;
            ASSERT_EQ(fast, ref);
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 7 * 4 * 6 * 6);
}

// What SampleToken's cut rests on: over every shape, the sum of all weights in the draw's order
// has the same bits as the sum of those at or above kSamplerNegligibleExponent alone. A cut at
// -30 would change some sums (checked, so this test can tell).
TEST(SamplerTest, TokensBelowTheCutChangeNoBitOfTheSum) {
  auto sums = [](const std::vector<float>& logits, double temperature, double cut) {
    std::vector<double> gaps;
    const double max = *std::max_element(logits.begin(), logits.end());
    const double inv_t = 1.0 / temperature;
    for (float x : logits) gaps.push_back((static_cast<double>(x) - max) * inv_t);
    std::sort(gaps.begin(), gaps.end(), std::greater<double>());
    double all = 0, kept = 0;
    for (double g : gaps) {
      all += SamplerExp(g);
      if (g >= cut) kept += SamplerExp(g);
    }
    return std::pair<double, double>{all, kept};
  };
  int differ_at_30 = 0;
  for (int seed = 0; seed < 40; ++seed) {
    for (float spread : {60.f, 400.f}) {
      const auto logits = LmLikeLogits(50257, spread, false, static_cast<uint64_t>(seed));
      for (double t : {0.7, 1.0, 3.0}) {
        const auto [all, kept] = sums(logits, t, kSamplerNegligibleExponent);
        ASSERT_EQ(all, kept) << "seed " << seed << " spread " << spread << " t " << t;
        const auto [all30, kept30] = sums(logits, t, -30.0);
        differ_at_30 += all30 != kept30;
      }
    }
  }
  EXPECT_GT(differ_at_30, 0);
}

TEST(SamplerTest, InfinitiesAndAllNanPickWithoutADraw) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SamplerScratch scratch;
  const SamplingParams p{.temperature = 1.f, .top_k = 0, .top_p = 1.f, .seed = 3};
  for (const std::vector<float>& logits :
       {std::vector<float>{1.f, inf, 2.f, inf}, std::vector<float>{-inf, nan, -inf},
        std::vector<float>{nan, nan}, std::vector<float>{-inf, -inf}}) {
    Rng rng(3), ref(3);
    const int n = static_cast<int>(logits.size());
    EXPECT_EQ(SampleToken(logits.data(), n, p, &rng, &scratch),
              FullSortReference(logits.data(), n, p, &ref));
    EXPECT_EQ(rng, Rng(3));  // no draw
  }
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
  SamplerScratch scratch;
  EXPECT_EQ(SampleToken(logits.data(), 4, p, &rng, &scratch), 1);
  EXPECT_EQ(rng, before);
}

TEST(SamplerTest, GreedyTakesLowestIndexOnTies) {
  std::vector<float> logits = {1.f, 5.f, 2.f, 5.f, 5.f};
  SamplingParams p;
  Rng rng(1);
  SamplerScratch scratch;
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
