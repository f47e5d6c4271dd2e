// Every kernel op on every Device (cpu, cuda), checked against the CPU body (itself checked
// against double-precision references in gemm_test / linear_attention_test): linear attention
// (all feature maps, chunked / recurrent / mixed splits, bit-exact chunk-grid splitting on the
// device itself), GEMM, RMSNorm, GELU, add, causal conv with its window, RoPE, paged attention.
// The cuda instances GTEST_SKIP with CheckDevice's reason when no GPU is visible.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/linear_attention.h"
#include "kernels/paged_attention.h"
#include "tests/kernels/device_test_util.h"

namespace flatstate::testing {
namespace {

constexpr int kHd = 8;
constexpr int kChunk = 16;

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double rel,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1;
  for (float v : want) scale = std::max(scale, std::abs(double(v)));
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      ASSERT_EQ(got[i], want[i]) << what << " i=" << i;
      continue;
    }
    ASSERT_NEAR(got[i], want[i], rel * scale) << what << " i=" << i;
  }
}

class DeviceKernels : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { FS_SKIP_UNLESS_DEVICE(GetParam()); }
  Device dev() const { return GetParam(); }
};

// ---- linear attention ----

LinearHead MakeHead(FeatureMap map, const float* proj) {
  LinearHead h;
  h.map = map;
  h.head_dim = kHd;
  h.feature_dim = map == FeatureMap::kCosformer ? 2 * kHd : map == FeatureMap::kFavor ? 12 : kHd;
  h.use_den = map != FeatureMap::kCosine;
  h.cosformer_step = M_PI / (2.0 * 100);
  h.cosine_exponent = 0.6;
  h.favor_proj = proj;
  return h;
}

struct LinRun {
  std::vector<float> out, S, z, M;
};

// Runs LinearAttention on `d` over T tokens in pieces; all buffers on the device.
LinRun RunLinear(Device d, FeatureMap map, const std::vector<float>& proj,
                 const std::vector<float>& qkv, int64_t T, const std::vector<int64_t>& pieces) {
  DeviceArray<float> dproj(d, proj), dqkv(d, qkv);
  const LinearHead h = MakeHead(map, dproj.get());
  DeviceArray<float> out(d, std::vector<float>(T * kHd, 0.f));
  DeviceArray<float> S(d, std::vector<float>(h.feature_dim * kHd, 0.f));
  DeviceArray<float> z(d, std::vector<float>(h.feature_dim, 0.f));
  DeviceArray<float> M(d, {map == FeatureMap::kFavor ? -std::numeric_limits<float>::infinity()
                                                     : 0.f});
  DeviceArray<float> scratch(d, std::vector<float>(LinearAttentionScratch(h, T, kChunk), 0.f));
  int64_t t = 0;
  for (int64_t n : pieces) {
    const float* base = dqkv.get() + t * 3 * kHd;
    FS_ON_DEVICE(d, LinearAttention, h, base, base + kHd, base + 2 * kHd, 3 * kHd, n, t, kChunk,
                 S.get(), z.get(), M.get(), out.get() + t * kHd, kHd, scratch.get());
    t += n;
  }
  return LinRun{out.ToHost(), S.ToHost(), z.ToHost(), M.ToHost()};
}

std::vector<int64_t> MixedPieces(int64_t T) {
  std::vector<int64_t> pieces;
  for (int64_t t = 0, p = 5; t < T; t += p, p = p == 5 ? 1 : 9) pieces.push_back(std::min(p, T - t));
  return pieces;
}

TEST_P(DeviceKernels, LinearAttentionMatchesCpuForEveryMapAndSplit) {
  for (FeatureMap map : {FeatureMap::kEluPlusOne, FeatureMap::kCosformer, FeatureMap::kCosine,
                         FeatureMap::kFavor}) {
    for (int64_t T : {1, kChunk - 1, kChunk, kChunk + 1, 200}) {
      SCOPED_TRACE(::testing::Message() << "map " << static_cast<int>(map) << " T=" << T);
      const auto proj = Random(12 * kHd, 1), qkv = Random(T * 3 * kHd, 2 + T);
      const LinRun cpu = RunLinear(Device::kCpu, map, proj, qkv, T, {T});
      for (const auto& pieces : {std::vector<int64_t>{T}, std::vector<int64_t>(T, 1),
                                 MixedPieces(T)}) {
        const LinRun got = RunLinear(dev(), map, proj, qkv, T, pieces);
        ExpectClose(got.out, cpu.out, 2e-5, "out");
        ExpectClose(got.S, cpu.S, 1e-4, "S");
        ExpectClose(got.z, cpu.z, 1e-4, "z");
        EXPECT_EQ(got.M, cpu.M);  // a max of the same floats
      }
    }
  }
}

TEST_P(DeviceKernels, LinearAttentionChunkGridSplitIsBitExactOnDevice) {
  const int64_t T = 70;
  const auto proj = Random(12 * kHd, 3), qkv = Random(T * 3 * kHd, 4);
  for (FeatureMap map : {FeatureMap::kEluPlusOne, FeatureMap::kCosformer, FeatureMap::kCosine,
                         FeatureMap::kFavor}) {
    const LinRun whole = RunLinear(dev(), map, proj, qkv, T, {T});
    const LinRun split = RunLinear(dev(), map, proj, qkv, T, {16, 32, 16, 6});
    EXPECT_EQ(whole.out, split.out) << static_cast<int>(map);
    EXPECT_EQ(whole.S, split.S);
    EXPECT_EQ(whole.z, split.z);
  }
}

// ---- GEMM ----

TEST_P(DeviceKernels, GemmMatchesCpu) {
  SerialParallel serial;
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 192}, {7, 128, 384},
                         {33, 768, 2304}, {3, 3072, 768}, {2, 128, 256}}) {
    const auto x = Random(m * k, 5), w = Random(n * k, 6), y0 = Random(m * n, 7);
    std::vector<float> want(m * n), want_acc = y0;
    Gemm<Device::kCpu>(x.data(), m, k, w.data(), n, want.data(), false, serial);
    Gemm<Device::kCpu>(x.data(), m, k, w.data(), n, want_acc.data(), true, serial);
    DeviceArray<float> dx(dev(), x), dw(dev(), w), dy(dev(), std::vector<float>(m * n)),
        dacc(dev(), y0);
    FS_ON_DEVICE(dev(), Gemm, dx.get(), m, k, dw.get(), n, dy.get(), false, serial);
    FS_ON_DEVICE(dev(), Gemm, dx.get(), m, k, dw.get(), n, dacc.get(), true, serial);
    // fp32 with different summation orders: |error| ~ sqrt(k) ulp of the row's magnitude.
    ExpectClose(dy.ToHost(), want, 2e-5, "gemm");
    ExpectClose(dacc.ToHost(), want_acc, 2e-5, "gemm accumulate");
  }
}

// ---- element-wise and normalisation ----

TEST_P(DeviceKernels, RmsNormGeluAddMatchCpu) {
  const int64_t rows = 5, dim = 768;
  const auto x = Random(rows * dim, 8, 3.f), w = Random(dim, 9), b = Random(rows * dim, 10);
  std::vector<float> want(rows * dim);
  RmsNorm<Device::kCpu>(x.data(), w.data(), rows, dim, 1e-5f, want.data());
  DeviceArray<float> dx(dev(), x), dw(dev(), w), dy(dev(), std::vector<float>(rows * dim));
  FS_ON_DEVICE(dev(), RmsNorm, dx.get(), dw.get(), rows, dim, 1e-5f, dy.get());
  ExpectClose(dy.ToHost(), want, 1e-6, "rmsnorm");
  // In place.
  FS_ON_DEVICE(dev(), RmsNorm, dx.get(), dw.get(), rows, dim, 1e-5f, dx.get());
  ExpectClose(dx.ToHost(), want, 1e-6, "rmsnorm in place");

  std::vector<float> g = x;
  Gelu<Device::kCpu>(g.data(), rows * dim);
  DeviceArray<float> dg(dev(), x);
  FS_ON_DEVICE(dev(), Gelu, dg.get(), rows * dim);
  ExpectClose(dg.ToHost(), g, 1e-6, "gelu");

  std::vector<float> a = x;
  AddInPlace<Device::kCpu>(a.data(), b.data(), rows * dim);
  DeviceArray<float> da(dev(), x), db(dev(), b);
  FS_ON_DEVICE(dev(), AddInPlace, da.get(), db.get(), rows * dim);
  EXPECT_EQ(da.ToHost(), a);  // one rounding either way
}

TEST_P(DeviceKernels, CausalConvAndWindowMatchCpu) {
  const int64_t dim = 200;
  const int K = 4;
  const auto w = Random(dim * K, 11);
  std::vector<float> window(static_cast<size_t>((K - 1) * dim), 0.f);
  DeviceArray<float> dw(dev(), w), dwin(dev(), window);
  // Calls of 1, 2 (shorter than the window), 9 and 1 rows: the window carries across calls.
  uint32_t seed = 12;
  for (int64_t T : {1, 2, 9, 1}) {
    const auto in = Random(T * dim, seed++);
    std::vector<float> out(T * dim);
    CausalConv<Device::kCpu>(in.data(), T, dim, K, w.data(), window.data(), out.data());
    DeviceArray<float> din(dev(), in), dout(dev(), std::vector<float>(T * dim));
    FS_ON_DEVICE(dev(), CausalConv, din.get(), T, dim, K, dw.get(), dwin.get(), dout.get());
    ExpectClose(dout.ToHost(), out, 1e-6, "conv out");
    EXPECT_EQ(dwin.ToHost(), window) << "window after T=" << T;
  }
}

TEST_P(DeviceKernels, RopeMatchesCpu) {
  const int64_t T = 6, stride = 3 * 64;
  const int heads = 4, hd = 16;
  const auto x = Random(T * stride, 20);
  std::vector<float> want = x;
  Rope<Device::kCpu>(want.data(), T, stride, 1000, heads, hd, 10000.f);
  DeviceArray<float> dx(dev(), x);
  FS_ON_DEVICE(dev(), Rope, dx.get(), T, stride, int64_t{1000}, heads, hd, 10000.f);
  ExpectClose(dx.ToHost(), want, 1e-6, "rope");
}

// ---- paged attention ----

TEST_P(DeviceKernels, PagedAttentionMatchesCpu) {
  const int bs = 16, layers = 2, heads = 4, hd = 16, hidden = heads * hd, blocks = 20;
  const auto pool = Random(static_cast<size_t>(blocks) * layers * 2 * bs * hidden, 21);
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(22));
  const auto q = Random(hidden, 23);
  DeviceArray<float> dpool(dev(), pool), dq(dev(), q);
  DeviceArray<int32_t> dtable(dev(), table);
  for (int64_t ctx : {1, 3, 15, 16, 17, 100, 320}) {
    for (int layer = 0; layer < layers; ++layer) {
      const int h = static_cast<int>(ctx % heads);
      std::vector<float> want(hd), scratch(ctx);
      PagedKv hv{const_cast<float*>(pool.data()), bs, layers, hidden};
      PagedAttention<Device::kCpu>(hv, table.data(), layer, h, hd, q.data() + h * hd, ctx,
                                   want.data(), scratch.data());
      PagedKv dv{dpool.get(), bs, layers, hidden};
      DeviceArray<float> out(dev(), std::vector<float>(hd)), dscratch(dev(), scratch);
      FS_ON_DEVICE(dev(), PagedAttention, dv, dtable.get(), layer, h, hd, dq.get() + h * hd, ctx,
                   out.get(), dscratch.get());
      ExpectClose(out.ToHost(), want, 1e-5, "paged ctx=" + std::to_string(ctx));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceKernels, ::testing::ValuesIn(AllDevices()),
                         DeviceParamName);

}  // namespace
}  // namespace flatstate::testing
