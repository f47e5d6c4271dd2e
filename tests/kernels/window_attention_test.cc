// WindowAttention (kernels/window_attention.h) on every Device: against a float64 banded
// softmax over the whole rotated sequence written here (lengths 1, W-1, W, W+1, 3W+5, chunks
// longer and shorter than W), bit-identical outputs and rings for any split of a prompt on the
// device itself, and the ring holding exactly positions max(0, P-W) .. P-1 in slot p mod W.
// The cuda instances GTEST_SKIP with CheckDevice's reason when no GPU is visible.
#include "kernels/window_attention.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/kernels/device_test_util.h"

namespace flatstate::testing {
namespace {

constexpr int kH = 2, kHd = 8, kD = kH * kHd, kW = 6, kStride = 3 * kD;
constexpr float kTheta = 10000.f;

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

void Rotate(std::vector<double>* x, int64_t pos) {
  for (int i = 0; i < kHd / 2; ++i) {
    const double a = pos * std::pow(double(kTheta), -2.0 * i / kHd);
    const double x1 = (*x)[i], x2 = (*x)[i + kHd / 2];
    (*x)[i] = x1 * std::cos(a) - x2 * std::sin(a);
    (*x)[i + kHd / 2] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

// out[t][h*hd + d] of softmax attention over positions max(0, t-W+1) .. t, in float64.
std::vector<double> Reference(const std::vector<float>& rows, int64_t T) {
  std::vector<double> out(T * kD, 0.0);
  for (int h = 0; h < kH; ++h) {
    std::vector<std::vector<double>> q(T), k(T);
    for (int64_t t = 0; t < T; ++t) {
      const float* r = rows.data() + t * kStride + h * kHd;
      q[t].assign(r, r + kHd);
      k[t].assign(r + kD, r + kD + kHd);
      Rotate(&q[t], t);
      Rotate(&k[t], t);
    }
    for (int64_t t = 0; t < T; ++t) {
      const int64_t lo = std::max<int64_t>(0, t - kW + 1);
      std::vector<double> s;
      double mx = -1e300, sum = 0;
      for (int64_t j = lo; j <= t; ++j) {
        double d = 0;
        for (int i = 0; i < kHd; ++i) d += q[t][i] * k[j][i];
        s.push_back(d / std::sqrt(double(kHd)));
        mx = std::max(mx, s.back());
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (int64_t j = lo; j <= t; ++j) {
        for (int d = 0; d < kHd; ++d) {
          out[t * kD + h * kHd + d] += s[j - lo] / sum * rows[j * kStride + 2 * kD + h * kHd + d];
        }
      }
    }
  }
  return out;
}

struct Result {
  std::vector<float> out, ring;  // ring: [ring_k (W x D) | ring_v (W x D)]
};

// `steps` (CPU only): the last piece's per-token records (WindowSeq::steps), (n - 1) states.
Result RunOn(Device d, const std::vector<float>& rows, int64_t T,
             const std::vector<int64_t>& pieces, std::vector<float>* steps = nullptr) {
  DeviceArray<float> drows(d, rows);
  DeviceArray<float> state(d, std::vector<float>(2 * kW * kD, 0.f));
  DeviceArray<float> out(d, std::vector<float>(T * kD, 0.f));
  SerialParallel serial;
  int64_t t = 0;
  for (int64_t n : pieces) {
    WindowSeq one{t, n, t, state.get()};
    if (steps != nullptr && t + n == T) {
      steps->assign(static_cast<size_t>((n - 1) * 2 * kW * kD), -1.f);
      one.steps = steps->data();
      one.steps_stride = 2 * kW * kD;
    }
    DeviceArray<WindowSeq> seq(d, {one});
    WindowBatch b;
    b.seqs = seq.get();
    b.num = 1;
    b.H = kH;
    b.head_dim = kHd;
    b.window = kW;
    b.rope_theta = kTheta;
    b.q = drows.get();
    b.k = drows.get() + kD;
    b.v = drows.get() + 2 * kD;
    b.in_stride = kStride;
    b.out = out.get();
    b.out_stride = kD;
    b.ring_k = 0;
    b.ring_v = kW * kD;
    FS_ON_DEVICE(d, WindowAttention, b, serial);
    SyncDevice(d);
    t += n;
  }
  return Result{out.ToHost(), state.ToHost()};
}

std::vector<std::vector<int64_t>> Splits(int64_t T) {
  std::vector<std::vector<int64_t>> s = {{T}, std::vector<int64_t>(T, 1)};
  std::vector<int64_t> mixed;
  for (int64_t t = 0, n = 5; t < T; t += n, n = n == 5 ? 1 : 9) mixed.push_back(std::min(n, T - t));
  s.push_back(mixed);
  return s;
}

class WindowAttentionTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { FS_SKIP_UNLESS_DEVICE(GetParam()); }
  Device dev() const { return GetParam(); }
};

TEST_P(WindowAttentionTest, MatchesFloat64BandedSoftmaxAndAnySplitGivesTheSameBits) {
  for (int64_t T : {1, kW - 1, kW, kW + 1, 3 * kW + 5}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T);
    const auto rows = Random(T * kStride, 11 + T);
    const std::vector<double> want = Reference(rows, T);
    const Result first = RunOn(dev(), rows, T, {T});
    for (int64_t i = 0; i < T * kD; ++i) ASSERT_NEAR(first.out[i], want[i], 1e-5) << i;
    for (const auto& pieces : Splits(T)) {
      const Result got = RunOn(dev(), rows, T, pieces);
      EXPECT_EQ(got.out, first.out);
      EXPECT_EQ(got.ring, first.ring);
    }
    // The ring: slot p mod W holds position p's rotated key and its value for the last W
    // positions; slots never written are zero.
    for (int64_t slot = 0; slot < kW; ++slot) {
      int64_t p = -1;
      for (int64_t c = std::max<int64_t>(0, T - kW); c < T; ++c) {
        if (c % kW == slot) p = c;
      }
      for (int h = 0; h < kH; ++h) {
        std::vector<double> k(rows.begin() + (p < 0 ? 0 : p * kStride + kD + h * kHd),
                              rows.begin() + (p < 0 ? 0 : p * kStride + kD + h * kHd + kHd));
        if (p >= 0) Rotate(&k, p);
        for (int d = 0; d < kHd; ++d) {
          const float ring_k = first.ring[slot * kD + h * kHd + d];
          const float ring_v = first.ring[kW * kD + slot * kD + h * kHd + d];
          if (p < 0) {
            EXPECT_EQ(ring_k, 0.f);
            EXPECT_EQ(ring_v, 0.f);
          } else {
            EXPECT_NEAR(ring_k, k[d], 1e-5);
            EXPECT_EQ(ring_v, rows[p * kStride + 2 * kD + h * kHd + d]);
          }
        }
      }
    }
  }
}

TEST_P(WindowAttentionTest, MatchesCpu) {
  const int64_t T = 40;
  const auto rows = Random(T * kStride, 5);
  const Result cpu = RunOn(Device::kCpu, rows, T, {16, 1, 23});
  const Result got = RunOn(dev(), rows, T, {16, 1, 23});
  for (size_t i = 0; i < cpu.out.size(); ++i) ASSERT_NEAR(got.out[i], cpu.out[i], 1e-5) << i;
  for (size_t i = 0; i < cpu.ring.size(); ++i) ASSERT_NEAR(got.ring[i], cpu.ring[i], 1e-5) << i;
}

// A speculative step's records (WindowSeq::steps): after a wrapped ring (9 tokens, W = 6), a
// call of 8 tokens (longer than W: slots written twice) leaves in record t the rings, bit for
// bit, of a run that stopped after its token t.
TEST(WindowAttentionRecords, RecordTIsTheRingAfterTokenT) {
  const int64_t P = 9, T = 8;
  const auto rows = Random((P + T) * kStride, 8);
  std::vector<float> steps;
  RunOn(Device::kCpu, rows, P + T, {P, T}, &steps);
  const size_t floats = 2 * kW * kD;
  for (int64_t t = 0; t + 1 < T; ++t) {
    const Result want = RunOn(Device::kCpu, rows, P + t + 1, {P + t + 1});
    const std::vector<float> got(steps.begin() + t * floats, steps.begin() + (t + 1) * floats);
    EXPECT_EQ(got, want.ring) << "record " << t;
  }
}

TEST_P(WindowAttentionTest, ShapeLimits) {
  EXPECT_EQ(FS_ON_DEVICE(dev(), CheckWindowAttentionShape, 7, 64).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FS_ON_DEVICE(dev(), CheckWindowAttentionShape, 8, 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(FS_ON_DEVICE(dev(), CheckWindowAttentionShape, 64, 64).ok());
}

INSTANTIATE_TEST_SUITE_P(Devices, WindowAttentionTest, ::testing::ValuesIn(AllDevices()),
                         DeviceParamName);

}  // namespace
}  // namespace flatstate::testing
