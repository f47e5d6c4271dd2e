// The GEMM (kernels/gemm.h) of every weight type on every Device (cpu, cuda) against the CPU's
// GEMM of that type (itself checked bit for bit against the types' definitions in gemm_test):
// f32 to fp32 rounding, bf16 / int8 / int4 within the bound of what CUDA computes differently
// (kernels/cuda/gemm.cu, docs/gpu.md), bf16 host weights (a BF16 model file) as their widened
// values, stored int8 / int4 quants as their fp32 originals, and the fixed-order kernel
// (batch_invariant) bit for bit for f32 and bf16.
// The cuda instances GTEST_SKIP with CheckDevice's reason when no GPU is visible.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm.h"
#include "tests/kernels/device_test_util.h"
#include "tests/kernels/gemm_test_util.h"

namespace flatstate::testing {
namespace {

class DeviceKernels : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { FS_SKIP_UNLESS_DEVICE(GetParam()); }
  Device dev() const { return GetParam(); }
};

// y = x w^T (+ y0 when accumulate) on D, with the weight prepared for D (GemmWeight's
// batch_invariant as given).
template <Device D>
std::vector<float> GemmOn(const std::vector<float>& x, int64_t m, int64_t k,
                          const std::vector<float>& w, int64_t n, const std::vector<float>& y0,
                          bool accumulate, bool batch_invariant = false) {
  SerialParallel serial;
  auto gw = PrepareGemmWeight<D>(w.data(), n, k);
  EXPECT_TRUE(gw.ok()) << gw.status();
  if (!gw.ok()) return {};
  gw->batch_invariant = batch_invariant;
  DeviceArray<float> dx(D, x), dy(D, y0);
  Gemm<D>(dx.get(), m, *gw, dy.get(), accumulate, serial);
  return dy.ToHost();
}

TEST_P(DeviceKernels, GemmMatchesCpu) {
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 192},
                         {7, 128, 384},
                         {33, 768, 2304},
                         {3, 3072, 768},
                         {2, 128, 256}}) {
    const auto x = Random(m * k, 5), w = Random(n * k, 6), y0 = Random(m * n, 7);
    const std::vector<float> zeros(m * n);
    const auto want = GemmOn<Device::kCpu>(x, m, k, w, n, zeros, false);
    const auto want_acc = GemmOn<Device::kCpu>(x, m, k, w, n, y0, true);
    // fp32 with different summation orders: |error| ~ sqrt(k) ulp of the row's magnitude.
    ExpectClose(FS_ON_DEVICE(dev(), GemmOn, x, m, k, w, n, zeros, false), want, 2e-5, "gemm");
    ExpectClose(FS_ON_DEVICE(dev(), GemmOn, x, m, k, w, n, y0, true), want_acc, 2e-5,
                "gemm accumulate");
  }
}

// A weight with batch_invariant set is multiplied in the CPU GEMM's order of operations on every
// device: the CPU's bits for every shape (row and column tiles cut anywhere, k not a multiple of
// the kernel's k tile), so a row's result cannot depend on m.
TEST_P(DeviceKernels, BatchInvariantGemmIsBitExactWithCpu) {
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 192},
                         {65, 100, 130},
                         {130, 768, 2304},
                         {3, 3072, 768},
                         {64, 33, 64}}) {
    const auto x = Random(m * k, 15), w = Random(n * k, 16), y0 = Random(m * n, 17);
    const std::vector<float> zeros(m * n);
    EXPECT_EQ(FS_ON_DEVICE(dev(), GemmOn, x, m, k, w, n, zeros, false, true),
              GemmOn<Device::kCpu>(x, m, k, w, n, zeros, false))
        << m << "x" << k << "x" << n;
    EXPECT_EQ(FS_ON_DEVICE(dev(), GemmOn, x, m, k, w, n, y0, true, true),
              GemmOn<Device::kCpu>(x, m, k, w, n, y0, true))
        << m << "x" << k << "x" << n << " accumulate";
    // The last row alone: the same bits as in the batch.
    const std::vector<float> last(x.end() - k, x.end());
    const auto alone =
        FS_ON_DEVICE(dev(), GemmOn, last, 1, k, w, n, std::vector<float>(n), false, true);
    const auto all = FS_ON_DEVICE(dev(), GemmOn, x, m, k, w, n, zeros, false, true);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.end() - n)) << m << "x" << k;
  }
}

// y = x w^T on D with w prepared for D as `dtype`, from w's fp32 values or (bf16_source) from
// the bf16 bits of w (PrepareGemmWeightBf16, what a torch_dtype bfloat16 model file feeds).
template <Device D>
std::vector<float> TypedGemmOn(const std::vector<float>& x, int64_t m, int64_t k,
                               const std::vector<float>& w, int64_t n, WeightDtype dtype,
                               bool batch_invariant, bool bf16_source = false) {
  SerialParallel serial;
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = Bf16FromFloat(w[i]);
  const GemmWeightOptions o{dtype, batch_invariant};
  auto gw = bf16_source ? PrepareGemmWeightBf16<D>(wb.data(), n, k, o)
                        : PrepareGemmWeight<D>(w.data(), n, k, o);
  EXPECT_TRUE(gw.ok()) << WeightDtypeName(dtype) << ": " << gw.status();
  if (!gw.ok()) return {};
  EXPECT_EQ(gw->dtype, dtype);
  DeviceArray<float> dx(D, x), dy(D, std::vector<float>(m * n, 0.f));
  Gemm<D>(dx.get(), m, *gw, dy.get(), false, serial);
  return dy.ToHost();
}

// The weight a quantised type multiplies with, as fp32: float(qw) * sw per column and block of
// 32 (the CPU's quantisation; CUDA dequantises to exactly these values), or bf16's widened value.
std::vector<float> EffectiveWeight(const std::vector<float>& w, int64_t n, int64_t k,
                                   WeightDtype dtype) {
  std::vector<float> out(w.size());
  constexpr int64_t kB = PackedWeight::kInt8Block;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b * kB < k; ++b) {
      const int64_t len = std::min(kB, k - b * kB);
      const float* block = w.data() + j * k + b * kB;
      int8_t q[kB];
      float s = 1.f;
      if (dtype == WeightDtype::kInt8) s = QuantizeBlockInt8(block, len, q);
      if (dtype == WeightDtype::kInt4) s = QuantizeBlockInt4(block, len, q);
      for (int64_t t = 0; t < len; ++t) {
        float& o = out[j * k + b * kB + t];
        o = dtype == WeightDtype::kBf16  ? FloatFromBf16(Bf16FromFloat(block[t]))
            : dtype == WeightDtype::kF32 ? block[t]
                                         : static_cast<float>(q[t]) * s;
      }
    }
  }
  return out;
}

// Every weight type on D against the CPU's GEMM of that type, element by element within the
// bound of what D computes differently (kernels/cuda/gemm.cu, docs/gpu.md). With eff the
// effective weight (EffectiveWeight), mag = sum_kk |x| |eff|:
//   f32       fp32 summation order only: 2 k 2^-24 mag.
//   bf16      CUDA rounds x to bf16 for cuBLAS: + 2^-8 mag.
//   int8/int4 CUDA multiplies fp32 x by the dequantised weight where the CPU quantises x per
//             block: + sum over blocks of (max|x_block| / 254) sum_block |eff| (1% slack), and
//             CUDA is checked against the product with eff to 2 k 2^-24 mag as well.
// On the CPU the bits are equal, and the exact (double) value of what CUDA computes (bf16: with
// x rounded to bf16) is checked against the same bounds, so the bounds are known to hold there.
TEST_P(DeviceKernels, GemmWeightTypesMatchCpuWithinTheirBounds) {
  constexpr int64_t kB = PackedWeight::kInt8Block;
  for (WeightDtype dtype :
       {WeightDtype::kF32, WeightDtype::kBf16, WeightDtype::kInt8, WeightDtype::kInt4}) {
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 192},
                           {7, 128, 384},
                           {33, 768, 2304},
                           {3, 3072, 768},
                           {5, 37, 100}}) {
      SCOPED_TRACE(std::string(WeightDtypeName(dtype)) + " " + std::to_string(m) + "x" +
                   std::to_string(k) + "x" + std::to_string(n));
      const auto x = Random(m * k, 25), w = Random(n * k, 26, 0.05f);
      const auto eff = EffectiveWeight(w, n, k, dtype);
      const auto want = TypedGemmOn<Device::kCpu>(x, m, k, w, n, dtype, false);
      const auto got = FS_ON_DEVICE(dev(), TypedGemmOn, x, m, k, w, n, dtype, false);
      ASSERT_EQ(got.size(), want.size());
      const bool cpu = dev() == Device::kCpu;
      if (cpu) {
        EXPECT_EQ(got, want);
      }
      const bool integer = dtype == WeightDtype::kInt8 || dtype == WeightDtype::kInt4;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double mag = 0, ref = 0, quant = 0, cuda = 0;
          for (int64_t b = 0; b * kB < k; ++b) {
            double amax = 0, wsum = 0;
            for (int64_t kk = b * kB; kk < std::min(k, (b + 1) * kB); ++kk) {
              const double xv = x[i * k + kk], wv = eff[j * k + kk];
              mag += std::abs(xv * wv);
              ref += xv * wv;
              cuda +=
                  (dtype == WeightDtype::kBf16 ? FloatFromBf16(Bf16FromFloat(x[i * k + kk])) : xv) *
                  wv;
              amax = std::max(amax, std::abs(xv));
              wsum += std::abs(wv);
            }
            quant += amax / 254 * wsum;
          }
          const double fp32 = 2.0 * k * 0x1p-24 * mag + 1e-30;
          const double bound = fp32 + (dtype == WeightDtype::kBf16 ? 0x1p-8 * mag : 0) +
                               (integer ? 1.01 * quant : 0);
          const double g = cpu ? cuda : got[i * n + j];
          ASSERT_NEAR(g, want[i * n + j], bound) << "row " << i << " col " << j;
          if (integer) {
            ASSERT_NEAR(g, ref, fp32) << "dequantised product, row " << i;
          }
        }
      }
    }
  }
}

// A bf16 host weight (a BF16 model file) gives, on every device and for every type, the bits of
// the same type prepared from its widened fp32 values.
TEST_P(DeviceKernels, Bf16SourceGemmEqualsItsWidenedF32Source) {
  const int64_t m = 5, k = 96, n = 130;
  const auto x = Random(m * k, 27), w = Random(n * k, 28);
  std::vector<float> wide(w.size());
  for (size_t i = 0; i < w.size(); ++i) wide[i] = FloatFromBf16(Bf16FromFloat(w[i]));
  for (WeightDtype dtype :
       {WeightDtype::kF32, WeightDtype::kBf16, WeightDtype::kInt8, WeightDtype::kInt4}) {
    for (bool bi : {false, true}) {
      EXPECT_EQ(FS_ON_DEVICE(dev(), TypedGemmOn, x, m, k, w, n, dtype, bi, true),
                FS_ON_DEVICE(dev(), TypedGemmOn, x, m, k, wide, n, dtype, bi, false))
          << WeightDtypeName(dtype) << (bi ? " batch_invariant" : "");
    }
  }
}

// The GEMM of a weight prepared from stored int8 / int4 quants and scales (a quantised model file:
// PrepareGemmWeightQuantized) as `as`.
template <Device D>
std::vector<float> StoredQuantGemmOn(const std::vector<float>& x, int64_t m,
                                     const QuantizedWeight& q, WeightDtype as,
                                     bool batch_invariant) {
  SerialParallel serial;
  auto gw = PrepareGemmWeightQuantized<D>(q.view(), {as, batch_invariant});
  EXPECT_TRUE(gw.ok()) << WeightDtypeName(as) << ": " << gw.status();
  if (!gw.ok()) return {};
  DeviceArray<float> dx(D, x), dy(D, std::vector<float>(m * q.n, 0.f));
  Gemm<D>(dx.get(), m, *gw, dy.get(), false, serial);
  return dy.ToHost();
}

// Stored quants give, on every device, the bits of their fp32 original prepared as that type
// (CUDA dequantises both to the same device weight), and as f32 those of the dequantised values.
TEST_P(DeviceKernels, StoredQuantsGemmEqualsItsFp32Source) {
  const int64_t m = 5, k = 77, n = 130;
  const auto x = Random(m * k, 37), w = Random(n * k, 38);
  for (WeightDtype dtype : {WeightDtype::kInt8, WeightDtype::kInt4}) {
    const QuantizedWeight q = QuantizeWeight(w.data(), n, k, dtype);
    std::vector<float> deq(w.size());
    DequantizeWeight(q.view(), deq.data());
    for (bool bi : {false, true}) {
      EXPECT_EQ(FS_ON_DEVICE(dev(), StoredQuantGemmOn, x, m, q, dtype, bi),
                FS_ON_DEVICE(dev(), TypedGemmOn, x, m, k, w, n, dtype, bi, false))
          << WeightDtypeName(dtype) << (bi ? " batch_invariant" : "");
      EXPECT_EQ(FS_ON_DEVICE(dev(), StoredQuantGemmOn, x, m, q, WeightDtype::kF32, bi),
                FS_ON_DEVICE(dev(), TypedGemmOn, x, m, k, deq, n, WeightDtype::kF32, bi, false))
          << WeightDtypeName(dtype) << " as f32" << (bi ? " batch_invariant" : "");
    }
  }
}

// bf16 weights with batch_invariant: the fixed-order kernel widens each weight exactly and runs
// the CPU's chain, so every device gives the CPU's bf16 bits, for any m and row position.
TEST_P(DeviceKernels, BatchInvariantBf16GemmIsBitExactWithCpu) {
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 192},
                         {65, 100, 130},
                         {130, 768, 2304},
                         {3, 3072, 768},
                         {64, 33, 64}}) {
    const auto x = Random(m * k, 35), w = Random(n * k, 36);
    const auto want = TypedGemmOn<Device::kCpu>(x, m, k, w, n, WeightDtype::kBf16, true);
    EXPECT_EQ(FS_ON_DEVICE(dev(), TypedGemmOn, x, m, k, w, n, WeightDtype::kBf16, true), want)
        << m << "x" << k << "x" << n;
    const std::vector<float> last(x.end() - k, x.end());
    const auto alone = FS_ON_DEVICE(dev(), TypedGemmOn, last, 1, k, w, n, WeightDtype::kBf16, true);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), want.end() - n)) << m << "x" << k;
  }
}

// PreparedWeightBytes (what benchmarks count a step's weight bytes with) is the size of what
// PrepareGemmWeight<D> holds for every type, odd shapes included.
template <Device D>
void ExpectPreparedBytes(WeightDtype dtype, int64_t n, int64_t k) {
  const auto w = Random(static_cast<size_t>(n * k), 31);
  auto gw = PrepareGemmWeight<D>(w.data(), n, k, {dtype});
  ASSERT_TRUE(gw.ok()) << gw.status();
  const size_t held = D == Device::kCpu ? gw->packed.bytes() : gw->data.bytes();
  EXPECT_EQ(held, PreparedWeightBytes(D, dtype, n, k))
      << WeightDtypeName(dtype) << " " << n << "x" << k;
}

// Not a parity test: what PrepareGemmWeight holds on each device, the CPU's panels included.
class PreparedBytes : public DeviceKernels {};

TEST_P(PreparedBytes, PreparedWeightBytesIsWhatPrepareHolds) {
  for (WeightDtype dtype :
       {WeightDtype::kF32, WeightDtype::kBf16, WeightDtype::kInt8, WeightDtype::kInt4}) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{2304, 768}, {70, 45}, {1, 33}}) {
      FS_ON_DEVICE(dev(), ExpectPreparedBytes, dtype, n, k);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceKernels, ::testing::ValuesIn(ParityDevices()),
                         DeviceParamName);
INSTANTIATE_TEST_SUITE_P(Devices, PreparedBytes, ::testing::ValuesIn(AllDevices()),
                         DeviceParamName);

}  // namespace
}  // namespace flatstate::testing
