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

// A speculative step's records (ConvSeq::steps): record t of a T-token call is the window a call
// that stopped after its token t leaves, bit for bit (K = 4: windows of 3 rows; T = 5 > K).
TEST(Elementwise, CausalConvRecordsTheWindowAfterEachToken) {
  const int64_t dim = 5, T = 5, offset = 2;  // the window sits at layer_offset 2 of its state
  const int K = 4;
  std::vector<float> w(dim * K), in(T * dim), state(offset + (K - 1) * dim);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.7f * static_cast<float>(i));
  for (size_t i = 0; i < state.size(); ++i) state[i] = std::cos(1.3f * static_cast<float>(i));
  const size_t stride = state.size();
  std::vector<float> steps((T - 1) * stride, -1.f), out(T * dim), running = state;
  std::vector<float> live = state;
  const ConvSeq seq{0, T, live.data(), steps.data(), static_cast<int64_t>(stride)};
  CausalConv<Device::kCpu>(in.data(), dim, K, w.data(), &seq, 1, offset, out.data());
  for (int64_t t = 0; t < T; ++t) {  // one token per call: the windows a stopped run leaves
    const ConvSeq one{0, 1, running.data()};
    std::vector<float> o(dim);
    CausalConv<Device::kCpu>(in.data() + t * dim, dim, K, w.data(), &one, 1, offset, o.data());
    if (t + 1 == T) {
      EXPECT_EQ(live, running) << "the live window after the call";
      break;
    }
    const std::vector<float> got(steps.begin() + t * stride + offset,
                                 steps.begin() + (t + 1) * stride);
    EXPECT_EQ(got, std::vector<float>(running.begin() + offset, running.end())) << "record " << t;
    EXPECT_EQ(steps[t * stride], -1.f) << "record " << t << " wrote outside the window";
  }
}

}  // namespace
}  // namespace flatstate
