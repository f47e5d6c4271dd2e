// kernels/recurrent_gates.h's CPU bodies against float64 definitions.
#include "kernels/recurrent_gates.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float sd = 2.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double SiluD(double x) { return x / (1.0 + std::exp(-x)); }

TEST(RecurrentGates, SiluRowsTouchesOnlyTheFirstDimFloats) {
  const int64_t rows = 5, stride = 12, dim = 9;
  const std::vector<float> in = Random(rows * stride, 1, 4.f);
  std::vector<float> x = in;
  SiluRows<Device::kCpu>(x.data(), rows, stride, dim);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < stride; ++i) {
      const float before = in[r * stride + i], after = x[r * stride + i];
      if (i < dim) {
        EXPECT_NEAR(after, SiluD(before), 1e-6 * (1 + std::abs(before)));
      } else {
        EXPECT_EQ(after, before);
      }
    }
  }
}

TEST(RecurrentGates, DeltaGatesFollowTheDefinition) {
  const int64_t rows = 7, in_stride = 10, out_stride = 6;
  const int heads = 4;
  std::vector<float> a = Random(rows * in_stride, 2, 8.f), b = Random(rows * in_stride, 3, 8.f);
  a[1] = 30.f;  // softplus above its threshold: x itself
  const std::vector<float> A_log = Random(heads, 4, 1.f), dt_bias = Random(heads, 5, 1.f);
  std::vector<float> g(rows * out_stride, 7.f), beta(rows * out_stride, 7.f);
  DeltaGates<Device::kCpu>(a.data(), b.data(), in_stride, rows, heads, A_log.data(), dt_bias.data(),
                           g.data(), beta.data(), out_stride);
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const double x = double(a[r * in_stride + h]) + dt_bias[h];
      const double sp = x > 20 ? x : std::log1p(std::exp(x));
      const double want_g = -std::exp(double(A_log[h])) * sp;
      const double want_beta = 1.0 / (1.0 + std::exp(-double(b[r * in_stride + h])));
      EXPECT_NEAR(g[r * out_stride + h], want_g, 2e-6 * (1 + std::abs(want_g)));
      EXPECT_NEAR(beta[r * out_stride + h], want_beta, 1e-6);
      EXPECT_LE(g[r * out_stride + h], 0.f);
    }
    for (int h = heads; h < out_stride; ++h) EXPECT_EQ(g[r * out_stride + h], 7.f);
  }
}

TEST(RecurrentGates, GatedHeadRmsNormFollowsTheDefinition) {
  const int64_t rows = 3, x_stride = 40, z_stride = 50;
  const int heads = 3, hd = 12;
  const std::vector<float> x0 = Random(rows * x_stride, 6), z = Random(rows * z_stride, 7);
  const std::vector<float> w = Random(hd, 8, 1.f);
  std::vector<float> x = x0;
  GatedHeadRmsNorm<Device::kCpu>(x.data(), x_stride, z.data(), z_stride, rows, heads, hd, w.data(),
                                 1e-6f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const float* xh = x0.data() + r * x_stride + h * hd;
      double ss = 0;
      for (int i = 0; i < hd; ++i) ss += double(xh[i]) * xh[i];
      const double inv = 1.0 / std::sqrt(ss / hd + 1e-6);
      for (int i = 0; i < hd; ++i) {
        const double want = xh[i] * inv * w[i] * SiluD(z[r * z_stride + h * hd + i]);
        EXPECT_NEAR(x[r * x_stride + h * hd + i], want, 1e-5 * (1 + std::abs(want)));
      }
    }
    for (int64_t i = heads * hd; i < x_stride; ++i) {
      EXPECT_EQ(x[r * x_stride + i], x0[r * x_stride + i]);  // past the heads: untouched
    }
  }
}

}  // namespace
}  // namespace flatstate
