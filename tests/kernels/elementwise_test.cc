// CPU element-wise ops against double-precision definitions.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/elementwise.h"

namespace flatstate {
namespace {

// Gelu uses a rational erf (kernels/cpu/elementwise.cc), not std::erf: check it against the exact
// GELU in double over the range activations take, including the clamp at |x / sqrt 2| = 4.
TEST(Elementwise, GeluMatchesExactGelu) {
  std::vector<float> x;
  for (float v = -12.f; v <= 12.f; v += 1.f / 512) x.push_back(v);
  x.push_back(1e-30f);
  x.push_back(-1e-30f);
  x.push_back(0.f);
  std::vector<float> y = x;
  Gelu<Device::kCpu>(y.data(), static_cast<int64_t>(y.size()));
  double max_err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    // Absolute error scaled by |x|: gelu = x * (1 + erf) / 2, erf is good to ~1e-7 absolute.
    const double err = std::abs(y[i] - want) / std::max(1.0, std::abs(v));
    max_err = std::max(max_err, err);
    ASSERT_LE(err, 4e-7) << "x = " << v << " got " << y[i] << " want " << want;
  }
  RecordProperty("max_scaled_error", std::to_string(max_err));
  // NaN propagates.
  float nan = std::nanf("");
  Gelu<Device::kCpu>(&nan, 1);
  EXPECT_TRUE(std::isnan(nan));
}

}  // namespace
}  // namespace flatstate
