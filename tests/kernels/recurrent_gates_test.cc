// kernels/recurrent_gates.h's CPU bodies against float64 definitions.
#include "kernels/recurrent_gates.h"

#include <algorithm>
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

TEST(RecurrentGates, DeltaBetaIsAScaledSigmoidOrTheScaleAlone) {
  const int64_t rows = 6, in_stride = 9, out_stride = 5;
  const int heads = 3;
  const std::vector<float> b = Random(rows * in_stride, 12, 8.f);
  for (float scale : {1.f, 2.f}) {
    std::vector<float> beta(rows * out_stride, 7.f), ones(rows * out_stride, 7.f);
    DeltaBeta<Device::kCpu>(b.data(), in_stride, rows, heads, scale, beta.data(), out_stride);
    DeltaBeta<Device::kCpu>(nullptr, 0, rows, heads, scale, ones.data(), out_stride);
    for (int64_t r = 0; r < rows; ++r) {
      for (int h = 0; h < heads; ++h) {
        const double want = scale / (1.0 + std::exp(-double(b[r * in_stride + h])));
        EXPECT_NEAR(beta[r * out_stride + h], want, 2e-6);
        EXPECT_EQ(ones[r * out_stride + h], scale);
      }
      for (int h = heads; h < out_stride; ++h) {
        EXPECT_EQ(beta[r * out_stride + h], 7.f);
        EXPECT_EQ(ones[r * out_stride + h], 7.f);
      }
    }
  }
}

TEST(RecurrentGates, GatedHeadRmsNormFollowsTheDefinition) {
  const int64_t rows = 3, x_stride = 40, z_stride = 50;
  const int heads = 3, hd = 12;
  const std::vector<float> x0 = Random(rows * x_stride, 6), z = Random(rows * z_stride, 7);
  const std::vector<float> w = Random(hd, 8, 1.f);
  std::vector<float> x = x0;
  GatedHeadRmsNorm<Device::kCpu>(x.data(), x_stride, z.data(), z_stride, rows, heads, hd, w.data(),
                                 0, 1e-6f, GateOrder::kNormThenGate);
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

TEST(RecurrentGates, GateThenNormWithAWeightPerHeadFollowsTheDefinition) {
  // Mamba-2's MambaRMSNormGated over groups: u = x silu(z), normalised, times the group's weight.
  const int64_t rows = 3, x_stride = 40, z_stride = 50;
  const int groups = 2, gd = 16;
  const std::vector<float> x0 = Random(rows * x_stride, 16), z = Random(rows * z_stride, 17);
  const std::vector<float> w = Random(groups * gd, 18, 1.f);
  std::vector<float> x = x0;
  GatedHeadRmsNorm<Device::kCpu>(x.data(), x_stride, z.data(), z_stride, rows, groups, gd, w.data(),
                                 gd, 1e-5f, GateOrder::kGateThenNorm);
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < groups; ++h) {
      std::vector<double> u(gd);
      double ss = 0;
      for (int i = 0; i < gd; ++i) {
        u[i] = double(x0[r * x_stride + h * gd + i]) * SiluD(z[r * z_stride + h * gd + i]);
        ss += u[i] * u[i];
      }
      const double inv = 1.0 / std::sqrt(ss / gd + 1e-5);
      for (int i = 0; i < gd; ++i) {
        const double want = u[i] * inv * w[h * gd + i];
        EXPECT_NEAR(x[r * x_stride + h * gd + i], want, 1e-5 * (1 + std::abs(want)));
      }
    }
    for (int64_t i = groups * gd; i < x_stride; ++i)
      EXPECT_EQ(x[r * x_stride + i], x0[r * x_stride + i]);
  }
}

TEST(RecurrentGates, SsmGatesClampTheStepAndScaleTheDecay) {
  const int64_t rows = 6, in_stride = 9, out_stride = 5;
  const int heads = 4;
  std::vector<float> a = Random(rows * in_stride, 12, 6.f);
  a[0] = 30.f;  // softplus above its threshold, then clamped to dt_max
  const std::vector<float> A_log = Random(heads, 13, 1.f), dt_bias = Random(heads, 14, 1.f);
  const float dt_min = 0.01f, dt_max = 5.f;
  std::vector<float> g(rows * out_stride, 7.f), dt(rows * out_stride, 7.f);
  SsmGates<Device::kCpu>(a.data(), in_stride, rows, heads, A_log.data(), dt_bias.data(), dt_min,
                         dt_max, g.data(), dt.data(), out_stride);
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      const double x = double(a[r * in_stride + h]) + dt_bias[h];
      const double sp = std::min(std::max(x > 20 ? x : std::log1p(std::exp(x)), 0.01), 5.0);
      EXPECT_NEAR(dt[r * out_stride + h], sp, 2e-6 * (1 + sp));
      EXPECT_NEAR(g[r * out_stride + h], -std::exp(double(A_log[h])) * sp,
                  2e-6 * (1 + std::exp(double(A_log[h])) * sp));
      EXPECT_GE(dt[r * out_stride + h], dt_min);
      EXPECT_LE(dt[r * out_stride + h], dt_max);
    }
    for (int h = heads; h < out_stride; ++h) EXPECT_EQ(dt[r * out_stride + h], 7.f);
  }
  EXPECT_EQ(dt[0], dt_max);
}

TEST(RecurrentGates, GlaGatesAreLogSigmoidOverTheNormalizerClamped) {
  const int64_t rows = 5, stride = 11, dim = 8;
  std::vector<float> x = Random(rows * stride, 15, 8.f);
  x[0] = 200.f;   // logsigmoid ~ 0 without overflow
  x[1] = -200.f;  // logsigmoid ~ x
  const std::vector<float> in = x, bias = Random(dim, 16, 1.f);
  for (const float clamp : {-1e30f, -0.05f}) {
    x = in;
    GlaGates<Device::kCpu>(x.data(), rows, stride, dim, bias.data(), 16.f, clamp);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < stride; ++i) {
        const float got = x[r * stride + i];
        if (i >= dim) {
          EXPECT_EQ(got, in[r * stride + i]);
          continue;
        }
        const double a = double(in[r * stride + i]) + bias[i];
        const double ls = a > 0 ? -std::log1p(std::exp(-a)) : a - std::log1p(std::exp(a));
        const double want = std::max(ls / 16, double(clamp));
        EXPECT_NEAR(got, want, 2e-6 * (1 + std::abs(want))) << a;
        EXPECT_LE(got, 0.f);
        EXPECT_TRUE(std::isfinite(got));
      }
    }
  }
  EXPECT_EQ(x[1], -0.05f);  // clamped
}

TEST(RecurrentGates, ScaleHeadsAndAddScaledHeadsAreExactProducts) {
  const int64_t rows = 3, x_stride = 30, s_stride = 4, out_stride = 26;
  const int heads = 3, hd = 8;
  const std::vector<float> x = Random(rows * x_stride, 20), s = Random(rows * s_stride, 21);
  std::vector<float> out(rows * out_stride, 7.f), y = Random(rows * out_stride, 22), y0 = y;
  ScaleHeads<Device::kCpu>(x.data(), x_stride, s.data(), s_stride, rows, heads, hd, out.data(),
                           out_stride);
  AddScaledHeads<Device::kCpu>(y.data(), out_stride, x.data(), x_stride, s.data(), rows, heads, hd);
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < hd; ++i) {
        const float xv = x[r * x_stride + h * hd + i];
        EXPECT_EQ(out[r * out_stride + h * hd + i], s[r * s_stride + h] * xv);
        EXPECT_EQ(y[r * out_stride + h * hd + i], y0[r * out_stride + h * hd + i] + s[h] * xv);
      }
    }
    for (int64_t i = heads * hd; i < out_stride; ++i) {
      EXPECT_EQ(out[r * out_stride + i], 7.f);
      EXPECT_EQ(y[r * out_stride + i], y0[r * out_stride + i]);
    }
  }
}

}  // namespace
}  // namespace flatstate
