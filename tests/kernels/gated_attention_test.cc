// GatedAttention (kernels/gated_attention.h) on every Device: the CPU body against a float64
// recurrence written here from docs/kinds.md (chunked and recurrent forms, lengths 1, C-1, C,
// C+1 and 200, decay from slow to fast gates); any device against the CPU body for every split;
// splitting on the chunk grid bit-exact on the device itself.
// The cuda instances GTEST_SKIP with CheckDevice's reason when no GPU is visible.
#include "kernels/gated_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/device_test_util.h"

namespace flatstate::testing {
namespace {

constexpr int kHd = 8, kR = 6, kF = 2 * kR, kChunk = 16;

std::vector<float> Random(size_t n, uint32_t seed, float mean = 0.f, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Row t of `rows`: q (hd), k (hd), v (hd), gate logit (1).
constexpr int kStride = 3 * kHd + 1;

struct Result {
  std::vector<double> out, S, z;
  double n = 0;
};

// docs/kinds.md's recurrence in float64.
Result Reference(const std::vector<float>& proj, float scale, float bias,
                 const std::vector<float>& rows, int64_t T) {
  Result r;
  r.S.assign(kF * kHd, 0.0);
  r.z.assign(kF, 0.0);
  auto phi = [&](const float* x) {
    double norm = 0;
    for (int i = 0; i < kHd; ++i) norm += double(x[i]) * x[i];
    norm = std::max(std::sqrt(norm), 1e-6);
    std::vector<double> f(kF);
    for (int j = 0; j < kR; ++j) {
      double u = 0;
      for (int i = 0; i < kHd; ++i) u += double(proj[j * kHd + i]) * (x[i] / norm);
      u *= scale;
      f[j] = std::sin(u) / std::sqrt(double(kR));
      f[kR + j] = std::cos(u) / std::sqrt(double(kR));
    }
    return f;
  };
  for (int64_t t = 0; t < T; ++t) {
    const float* row = rows.data() + t * kStride;
    const auto fq = phi(row), fk = phi(row + kHd);
    const double a = double(row[3 * kHd]) + bias, g = 1 / (1 + std::exp(-a)),
                 omg = 1 / (1 + std::exp(a));
    for (int f = 0; f < kF; ++f) {
      for (int d = 0; d < kHd; ++d) {
        r.S[f * kHd + d] = g * r.S[f * kHd + d] + omg * fk[f] * row[2 * kHd + d];
      }
      r.z[f] = g * r.z[f] + omg * fk[f];
    }
    r.n = g * r.n + omg;
    double den = 0;
    for (int f = 0; f < kF; ++f) den += fq[f] * r.z[f];
    den = std::max(den, 0.01 * r.n);
    for (int d = 0; d < kHd; ++d) {
      double num = 0;
      for (int f = 0; f < kF; ++f) num += fq[f] * r.S[f * kHd + d];
      r.out.push_back(num / den);
    }
  }
  return r;
}

// GatedAttention<d> over T tokens in `pieces` (one sequence, one head per call), everything on
// the device.
Result RunOn(Device d, const std::vector<float>& proj, float scale, float bias,
             const std::vector<float>& rows, int64_t T, const std::vector<int64_t>& pieces) {
  DeviceArray<float> dproj(d, proj), drows(d, rows);
  LinearHead h;
  h.head_dim = kHd;
  h.feature_dim = kF;
  h.feature_proj = dproj.get();
  h.rfa_scale = scale;
  h.gate_bias = bias;
  DeviceArray<LinearHead> dhead(d, {h});
  DeviceArray<float> state(d, std::vector<float>(kF * kHd + kF + 1, 0.f));
  DeviceArray<float> out(d, std::vector<float>(T * kHd, 0.f));
  SerialParallel serial;
  int64_t t = 0;
  for (int64_t n : pieces) {
    LinearSeq seq;
    seq.row = t;
    seq.T = n;
    seq.pos0 = t;
    seq.state = state.get();
    std::vector<int64_t> row_t(n);
    std::iota(row_t.begin(), row_t.end(), 0);
    DeviceArray<LinearSeq> dseq(d, {seq});
    DeviceArray<int32_t> drow_seq(d, std::vector<int32_t>(n, 0));
    DeviceArray<int64_t> drow_t(d, row_t);
    LinearBatch b;
    b.heads = dhead.get();
    b.H = 1;
    b.head_dim = kHd;
    b.feature_dim = kF;
    b.q = drows.get();
    b.k = drows.get() + kHd;
    b.v = drows.get() + 2 * kHd;
    b.gate = drows.get() + 3 * kHd;
    b.in_stride = kStride;
    b.out = out.get();
    b.out_stride = kHd;
    b.z_off = kF * kHd;
    b.m_off = kF * kHd + kF;
    b.chunk = kChunk;
    if (n == 1) {
      b.decode = dseq.get();
      b.num_decode = 1;
    } else {
      b.prefill = dseq.get();
      b.num_prefill = 1;
      b.row_seq = drow_seq.get();
      b.row_t = drow_t.get();
      b.prefill_rows = n;
    }
    FS_ON_DEVICE(d, GatedAttention, b, serial);
    SyncDevice(d);  // the descriptors above go out of scope
    t += n;
  }
  const std::vector<float> st = state.ToHost(), o = out.ToHost();
  Result r;
  r.out.assign(o.begin(), o.end());
  r.S.assign(st.begin(), st.begin() + kF * kHd);
  r.z.assign(st.begin() + kF * kHd, st.begin() + kF * kHd + kF);
  r.n = st.back();
  return r;
}

void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (double v : want) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], tol * scale) << what << i;
}

std::vector<int64_t> MixedPieces(int64_t T) {
  std::vector<int64_t> p;
  for (int64_t t = 0, n = 5; t < T; t += n, n = n == 5 ? 1 : 9) p.push_back(std::min(n, T - t));
  return p;
}

class GatedAttentionTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { FS_SKIP_UNLESS_DEVICE(GetParam()); }
  Device dev() const { return GetParam(); }
};

TEST_P(GatedAttentionTest, MatchesFloat64RecurrenceForEveryLengthAndSplit) {
  const auto proj = Random(kR * kHd, 1);
  // Gate bias -3 (fast decay: |c| over a chunk up to ~50) to +4 (slow: n grows from ~0.02).
  for (float bias : {-3.f, 0.f, 4.f}) {
    for (int64_t T : {1, kChunk - 1, kChunk, kChunk + 1, 200}) {
      SCOPED_TRACE(::testing::Message() << "bias " << bias << " T=" << T);
      const auto rows = Random(T * kStride, 7 + T);
      const Result want = Reference(proj, 1.3f, bias, rows, T);
      for (const auto& pieces :
           {std::vector<int64_t>{T}, std::vector<int64_t>(T, 1), MixedPieces(T)}) {
        const Result got = RunOn(dev(), proj, 1.3f, bias, rows, T, pieces);
        ExpectClose(got.out, want.out, 2e-4, "out");
        ExpectClose(got.S, want.S, 1e-4, "S");
        ExpectClose(got.z, want.z, 1e-4, "z");
        EXPECT_NEAR(got.n, want.n, 1e-5);
      }
    }
  }
}

TEST_P(GatedAttentionTest, ChunkGridSplitIsBitExact) {
  const int64_t T = 70;
  const auto proj = Random(kR * kHd, 3), rows = Random(T * kStride, 4);
  const Result whole = RunOn(dev(), proj, 0.8f, 1.f, rows, T, {T});
  const Result split = RunOn(dev(), proj, 0.8f, 1.f, rows, T, {16, 32, 16, 6});
  EXPECT_EQ(whole.out, split.out);
  EXPECT_EQ(whole.S, split.S);
  EXPECT_EQ(whole.z, split.z);
  EXPECT_EQ(whole.n, split.n);
}

TEST_P(GatedAttentionTest, ShapeLimits) {
  const auto st = FS_ON_DEVICE(dev(), CheckGatedAttentionShape, kHd, 7);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(FS_ON_DEVICE(dev(), CheckGatedAttentionShape, 64, 64).ok());
}

INSTANTIATE_TEST_SUITE_P(Devices, GatedAttentionTest, ::testing::ValuesIn(AllDevices()),
                         DeviceParamName);

}  // namespace
}  // namespace flatstate::testing
