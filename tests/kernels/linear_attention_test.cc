// The linear-attention kernel against a double-precision parallel (masked quadratic) reference,
// and its recurrent form against its chunked form, for every feature map, at lengths around
// chunk boundaries and split at arbitrary points.
#include "kernels/linear_attention.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

constexpr int kHd = 8;
constexpr int kChunk = 16;

struct Case {
  FeatureMap map;
  const char* name;
};

LinearHead MakeHead(FeatureMap map, const std::vector<float>& proj) {
  LinearHead h;
  h.map = map;
  h.head_dim = kHd;
  h.feature_dim = map == FeatureMap::kCosformer ? 2 * kHd : map == FeatureMap::kFavor ? 12 : kHd;
  h.use_den = map != FeatureMap::kCosine;
  h.cosformer_step = M_PI / (2.0 * 100);
  h.cosine_exponent = 0.6;
  h.feature_proj = proj.data();
  return h;
}

struct KernelRun {
  std::vector<float> out, S, z;
  float M;
};

// Runs the kernel over T tokens, in pieces of the given sizes.
KernelRun RunKernel(const LinearHead& h, const std::vector<float>& qkv, int64_t T,
              const std::vector<int64_t>& pieces) {
  KernelRun r;
  r.out.assign(T * kHd, 0.f);
  r.S.assign(h.feature_dim * kHd, 0.f);
  r.z.assign(h.feature_dim, 0.f);
  r.M = h.map == FeatureMap::kFavor ? -std::numeric_limits<float>::infinity() : 0.f;
  int64_t t = 0;
  for (int64_t n : pieces) {
    std::vector<float> scratch(LinearAttentionScratch(h, n, kChunk));
    const float* base = qkv.data() + t * 3 * kHd;
    LinearAttentionCpu(h, base, base + kHd, base + 2 * kHd, 3 * kHd, n, t, kChunk, r.S.data(),
                       r.z.data(), &r.M, r.out.data() + t * kHd, kHd, scratch.data());
    t += n;
  }
  return r;
}

// Double-precision parallel form, straight from the definition.
std::vector<double> Reference(const LinearHead& h, const std::vector<float>& qkv, int64_t T) {
  const int F = h.feature_dim;
  std::vector<double> fq(T * F), fk(T * F), m(T, 0), v(T * kHd);
  for (int64_t t = 0; t < T; ++t) {
    const float* q = qkv.data() + t * 3 * kHd;
    const float* k = q + kHd;
    const float* vv = q + 2 * kHd;
    for (int d = 0; d < kHd; ++d) v[t * kHd + d] = vv[d];
    switch (h.map) {
      case FeatureMap::kEluPlusOne:
        for (int d = 0; d < kHd; ++d) {
          fq[t * F + d] = q[d] > 0 ? q[d] + 1.0 : std::exp(double(q[d]));
          fk[t * F + d] = k[d] > 0 ? k[d] + 1.0 : std::exp(double(k[d]));
        }
        break;
      case FeatureMap::kCosformer: {
        const double c = std::cos(t * h.cosformer_step), s = std::sin(t * h.cosformer_step);
        for (int d = 0; d < kHd; ++d) {
          fq[t * F + d] = std::max(0.0, double(q[d])) * c;
          fq[t * F + kHd + d] = std::max(0.0, double(q[d])) * s;
          fk[t * F + d] = std::max(0.0, double(k[d])) * c;
          fk[t * F + kHd + d] = std::max(0.0, double(k[d])) * s;
        }
        break;
      }
      case FeatureMap::kCosine: {
        double nq = 0, nk = 0;
        for (int d = 0; d < kHd; ++d) nq += double(q[d]) * q[d], nk += double(k[d]) * k[d];
        nq = std::max(std::sqrt(nq), 1e-6), nk = std::max(std::sqrt(nk), 1e-6);
        for (int d = 0; d < kHd; ++d) fq[t * F + d] = q[d] / nq, fk[t * F + d] = k[d] / nk;
        const double sc = std::pow(double(t + 1), -h.cosine_exponent);
        for (int d = 0; d < kHd; ++d) v[t * kHd + d] *= sc;
        break;
      }
      case FeatureMap::kFavor: {
        const double s = std::pow(double(kHd), -0.25);
        double q2 = 0, k2 = 0;
        for (int d = 0; d < kHd; ++d) q2 += (q[d] * s) * (q[d] * s), k2 += (k[d] * s) * (k[d] * s);
        double mq = -1e300, mk = -1e300;
        std::vector<double> lq(F), lk(F);
        for (int f = 0; f < F; ++f) {
          double a = 0, b = 0;
          for (int d = 0; d < kHd; ++d) {
            a += h.feature_proj[f * kHd + d] * q[d] * s;
            b += h.feature_proj[f * kHd + d] * k[d] * s;
          }
          lq[f] = a - 0.5 * q2, lk[f] = b - 0.5 * k2;
          mq = std::max(mq, lq[f]), mk = std::max(mk, lk[f]);
        }
        // Unstabilised features are fine in double for these magnitudes.
        for (int f = 0; f < F; ++f) fq[t * F + f] = std::exp(lq[f] - mq), fk[t * F + f] = std::exp(lk[f]);
        break;
      }
    }
  }
  std::vector<double> out(T * kHd);
  for (int64_t i = 0; i < T; ++i) {
    double den = 0;
    std::vector<double> num(kHd, 0);
    for (int64_t j = 0; j <= i; ++j) {
      double a = 0;
      for (int f = 0; f < F; ++f) a += fq[i * F + f] * fk[j * F + f];
      den += a;
      for (int d = 0; d < kHd; ++d) num[d] += a * v[j * kHd + d];
    }
    for (int d = 0; d < kHd; ++d) out[i * kHd + d] = h.use_den ? num[d] / (den + h.eps) : num[d];
  }
  return out;
}

class LinearAttentionTest : public ::testing::TestWithParam<std::tuple<Case, int64_t>> {};

TEST_P(LinearAttentionTest, FormsAgreeWithReference) {
  const auto [c, T] = GetParam();
  std::mt19937 g(static_cast<uint32_t>(T) * 7 + static_cast<int>(c.map));
  std::normal_distribution<float> nd;
  std::vector<float> proj(12 * kHd), qkv(T * 3 * kHd);
  for (auto& x : proj) x = nd(g);
  for (auto& x : qkv) x = nd(g);
  const LinearHead h = MakeHead(c.map, proj);
  const auto ref = Reference(h, qkv, T);
  const KernelRun chunked = RunKernel(h, qkv, T, {T});
  const KernelRun recurrent = RunKernel(h, qkv, T, std::vector<int64_t>(T, 1));
  // Split at arbitrary (off-grid) points too: 5, then 1, then the rest.
  std::vector<int64_t> pieces;
  for (int64_t t = 0, p = 5; t < T; t += p, p = p == 5 ? 1 : 9) pieces.push_back(std::min(p, T - t));
  const KernelRun mixed = RunKernel(h, qkv, T, pieces);
  double scale = 1;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  for (int64_t i = 0; i < T * kHd; ++i) {
    ASSERT_NEAR(chunked.out[i], ref[i], 2e-5 * scale) << c.name << " T=" << T << " i=" << i;
    ASSERT_NEAR(recurrent.out[i], ref[i], 2e-5 * scale) << c.name << " T=" << T << " i=" << i;
    ASSERT_NEAR(mixed.out[i], ref[i], 2e-5 * scale) << c.name << " T=" << T << " i=" << i;
  }
  for (size_t i = 0; i < chunked.S.size(); ++i) {
    ASSERT_NEAR(chunked.S[i], recurrent.S[i], 1e-4 * (1 + std::abs(recurrent.S[i])));
  }
  EXPECT_EQ(chunked.M, recurrent.M);
}

TEST(LinearAttentionGrid, SplittingOnChunkGridIsBitExact) {
  std::mt19937 g(3);
  std::normal_distribution<float> nd;
  const int64_t T = 70;
  std::vector<float> proj(12 * kHd), qkv(T * 3 * kHd);
  for (auto& x : proj) x = nd(g);
  for (auto& x : qkv) x = nd(g);
  for (FeatureMap map : {FeatureMap::kEluPlusOne, FeatureMap::kCosformer, FeatureMap::kCosine,
                         FeatureMap::kFavor}) {
    const LinearHead h = MakeHead(map, proj);
    const KernelRun whole = RunKernel(h, qkv, T, {T});
    const KernelRun split = RunKernel(h, qkv, T, {16, 32, 16, 6});  // grid points 16, 48, 64
    EXPECT_EQ(whole.out, split.out);
    EXPECT_EQ(whole.S, split.S);
    EXPECT_EQ(whole.z, split.z);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Maps, LinearAttentionTest,
    ::testing::Combine(::testing::Values(Case{FeatureMap::kEluPlusOne, "elu"},
                                         Case{FeatureMap::kCosformer, "cosformer"},
                                         Case{FeatureMap::kCosine, "cosine"},
                                         Case{FeatureMap::kFavor, "favor"}),
                       ::testing::Values(1, kChunk - 1, kChunk, kChunk + 1, 200)));

}  // namespace
}  // namespace flatstate
