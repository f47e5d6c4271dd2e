// SamplerExp (engine/sampling/sampler_exp.h): its accuracy against the C library's exp, the AVX2
// body against the scalar definition bit for bit, and sort keys decoded back to their values.
#include "engine/sampling/sampler_exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace flatstate {
namespace {

// sampler.cc's key: ascending order of the key is descending order of the float.
uint64_t Key(float x, uint32_t id) {
  const uint32_t b = std::bit_cast<uint32_t>(x + 0.f);
  const uint32_t ascending = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return static_cast<uint64_t>(~ascending) << 32 | id;
}

// Distance in ulps between two positive finite doubles.
int64_t Ulps(double a, double b) {
  return std::abs(std::bit_cast<int64_t>(a) - std::bit_cast<int64_t>(b));
}

TEST(SamplerExp, WithinFourUlpsOfTheLibraryExp) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-708.0, 0.0), near(-45.0, 0.0);
  int64_t worst = 0;
  for (int i = 0; i < 400000; ++i) {
    const double x = i % 2 == 0 ? u(rng) : near(rng);
    const int64_t d = Ulps(SamplerExp(x), std::exp(x));
    worst = std::max(worst, d);
    ASSERT_LE(d, 4) << "x = " << x;
  }
  // Half-way points of the reduction and the ends of the domain.
  for (int k = 0; k <= 1021; ++k) {
    for (double x : {-k * std::log(2.0), (-k - 0.5) * std::log(2.0)}) {
      if (x >= -708.0) {
        EXPECT_LE(Ulps(SamplerExp(x), std::exp(x)), 4) << "x = " << x;
      }
    }
  }
  EXPECT_EQ(SamplerExp(0.0), 1.0);
  EXPECT_EQ(SamplerExp(-0.0), 1.0);
  EXPECT_EQ(SamplerExp(-708.5), 0.0);
  EXPECT_EQ(SamplerExp(-std::numeric_limits<double>::infinity()), 0.0);
  RecordProperty("worst_ulps", static_cast<int>(worst));
}

TEST(SamplerExp, KeysDecodeToTheirValues) {
  for (float x : {0.f, -0.f, 1.f, -1.f, 3.5e-42f, -3.5e-42f, 1e30f, -1e30f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()}) {
    EXPECT_EQ(std::bit_cast<uint32_t>(KeyValue(Key(x, 7))), std::bit_cast<uint32_t>(x + 0.f)) << x;
  }
}

// The weights SampleToken takes, over keys of every kind of value it can hold (finite logits
// near and far from the top one, -inf), equal the scalar definition bit for bit at every count
// (the vector body's tail included).
TEST(SamplerExp, WeightsEqualTheDefinitionBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> logit(0.f, 6.f);
  for (size_t n : {0, 1, 3, 4, 5, 17, 1000, 50257}) {
    std::vector<uint64_t> keys(n);
    float max = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) {
      float v = logit(rng);
      if (i % 97 == 5) v = -std::numeric_limits<float>::infinity();
      if (i % 89 == 3) v = -1e30f;
      max = std::max(max, v);
      keys[i] = Key(v, static_cast<uint32_t>(i));
    }
    for (double inv_t : {1.0, 1.0 / 0.8, 1.0 / 0.05, 1.0 / 7.0}) {
      std::vector<double> got(n);
      SamplerExpWeights(keys.data(), n, max, inv_t, got.data());
      for (size_t i = 0; i < n; ++i) {
        const double want =
            SamplerExp((static_cast<double>(KeyValue(keys[i])) - static_cast<double>(max)) * inv_t);
        ASSERT_EQ(std::bit_cast<uint64_t>(got[i]), std::bit_cast<uint64_t>(want))
            << "n " << n << " i " << i << " inv_t " << inv_t;
      }
    }
  }
}

}  // namespace
}  // namespace flatstate
