// kernels/cpu/attend_tile.h's ExpNonPositive, the exp that every attention body computes: its
// accuracy against a float64 exp over the whole range it is used on, and its edge values. (The
// bodies' agreement, bit for bit, is tests/kernels/paged_attention_test.cc.)
#include "kernels/cpu/attend_tile.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace flatstate::cpu {
namespace {

// |got - want| in units of the float spacing at want.
double UlpError(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp =
      static_cast<double>(std::nextafter(w, std::numeric_limits<float>::infinity())) -
      static_cast<double>(w);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

TEST(ExpNonPositiveTest, WithinOneAndAHalfUlpOfExpFromMinus87ToZero) {
  double worst = 0, at = 0;
  for (float x = 0.f; x >= -87.f; x -= 1.3e-4f) {
    const double e = UlpError(ExpNonPositive(x), std::exp(static_cast<double>(x)));
    if (e > worst) worst = e, at = x;
  }
  // Every float of one binade near 0, where r is smallest and rounding matters most.
  for (float x = -1.f; x < -0.5f; x = std::nextafter(x, 0.f)) {
    const double e = UlpError(ExpNonPositive(x), std::exp(static_cast<double>(x)));
    if (e > worst) worst = e, at = x;
  }
  EXPECT_LE(worst, 1.5) << "at x = " << at;  // measured: 1.002
  RecordProperty("worst_ulp", std::to_string(worst));
}

TEST(ExpNonPositiveTest, EdgeValues) {
  EXPECT_EQ(ExpNonPositive(0.f), 1.f);
  EXPECT_EQ(ExpNonPositive(-0.f), 1.f);
  EXPECT_EQ(ExpNonPositive(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_EQ(ExpNonPositive(-87.5f), 0.f);  // below the cut: would be subnormal
  EXPECT_GT(ExpNonPositive(-87.f), 0.f);
  EXPECT_TRUE(std::isnan(ExpNonPositive(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace flatstate::cpu
