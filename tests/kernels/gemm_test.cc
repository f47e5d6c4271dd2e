// The CPU GEMM for every weight type (f32, bf16, int8, int4, bf16dot) and every body this CPU has:
// each output element is its type's chain of kernels/gemm.h bit for bit (so the bodies agree), a
// row's result does not depend on the number of rows in the call, its position or the thread
// count, and the quantised types stay close to the f32 product. Checked for every shape the
// shipped (d=128) and benchmark (GPT-2-small) models use, plus ragged ones.
#include "kernels/gemm.h"

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/gemm_test_util.h"
#include "tests/util/model_writer.h"

namespace flatstate::testing {
namespace {

std::string Label(WeightDtype dtype, GemmIsa isa, int64_t m, int64_t k, int64_t n) {
  return std::string(WeightDtypeName(dtype)) + " body " + GemmBodyName(isa, dtype) +
         " m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n);
}

class GemmInvariance : public ::testing::TestWithParam<std::tuple<GemmShape, WeightDtype>> {};

TEST_P(GemmInvariance, RowsDoNotDependOnBatch) {
  const auto [shape, dtype] = GetParam();
  const auto [k, n] = shape;
  const int64_t max_m = 100;
  const auto w = Random(n * k, 1), x = Random(max_m * k, 2);
  SerialParallel serial;
  PoolParallel pool(2);
  const auto gw = PrepareGemmWeight<Device::kCpu>(w.data(), n, k, {dtype});
  ASSERT_TRUE(gw.ok()) << gw.status();
  ASSERT_EQ(gw->dtype, dtype);
  std::vector<float> alone(max_m * n);
  for (int64_t r = 0; r < max_m; ++r) {
    Gemm<Device::kCpu>(x.data() + r * k, 1, *gw, alone.data() + r * n, false, serial);
  }
  for (int64_t m : {2, 3, 7, 16, 17, 33, 40, 99}) {
    for (const Parallel* par : {static_cast<const Parallel*>(&serial),
                                static_cast<const Parallel*>(&pool)}) {
      // Rows 0..m-1 in one call, and the same rows shifted by one position.
      std::vector<float> y(m * n), y2((m + 1) * n);
      Gemm<Device::kCpu>(x.data(), m, *gw, y.data(), false, *par);
      std::vector<float> shifted((m + 1) * k, 0.5f);
      std::memcpy(shifted.data() + k, x.data(), sizeof(float) * m * k);
      Gemm<Device::kCpu>(shifted.data(), m + 1, *gw, y2.data(), false, *par);
      for (int64_t r = 0; r < m; ++r) {
        ASSERT_EQ(0, std::memcmp(y.data() + r * n, alone.data() + r * n, sizeof(float) * n))
            << Label(dtype, ActiveGemmIsa(), m, k, n) << " row " << r;
        ASSERT_EQ(0, std::memcmp(y2.data() + (r + 1) * n, alone.data() + r * n, sizeof(float) * n))
            << "shifted: " << Label(dtype, ActiveGemmIsa(), m, k, n) << " row " << r;
      }
    }
  }
}

TEST_P(GemmInvariance, AccumulateAddsToOutput) {
  const auto [shape, dtype] = GetParam();
  const auto [k, n] = shape;
  const auto w = Random(n * k, 3), x = Random(3 * k, 4);
  SerialParallel serial;
  const auto gw = PrepareGemmWeight<Device::kCpu>(w.data(), n, k, {dtype});
  ASSERT_TRUE(gw.ok()) << gw.status();
  std::vector<float> y(3 * n), base = Random(3 * n, 5), acc = base;
  Gemm<Device::kCpu>(x.data(), 3, *gw, y.data(), false, serial);
  Gemm<Device::kCpu>(x.data(), 3, *gw, acc.data(), true, serial);
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(acc[i], base[i] + y[i]);
  // And the values are a real product: compare one element to a double dot product (int8: to
  // the quantisation's error, a few per cent of the terms' magnitude).
  double ref = 0, mag = 0;
  for (int64_t i = 0; i < k; ++i) {
    ref += double(x[k + i]) * w[(n - 1) * k + i];
    mag += std::abs(double(x[k + i]) * w[(n - 1) * k + i]);
  }
  const double tol = dtype == WeightDtype::kF32       ? 1e-3 * (1 + std::abs(ref))
                     : dtype == WeightDtype::kBf16    ? 1e-2 * mag
                     : dtype == WeightDtype::kInt8    ? 3e-2 * mag
                     : dtype == WeightDtype::kBf16Dot ? 2e-2 * mag
                                                      : 0.2 * mag;
  EXPECT_NEAR(y[n + n - 1], ref, tol);
}

// Every body on every model shape: the type's chain bit for bit, batch-1 (decode) and a
// 7-row block (prefill: full register blocks plus a tail).
TEST_P(GemmInvariance, EveryBodyComputesTheChainOnModelShapes) {
  const auto [shape, dtype] = GetParam();
  const auto [k, n] = shape;
  const auto w = Random(n * k, 21), x = Random(7 * k, 22);
  const auto gw = PrepareGemmWeight<Device::kCpu>(w.data(), n, k, {dtype});
  ASSERT_TRUE(gw.ok()) << gw.status();
  PoolParallel pool(2);
  for (int64_t m : {1, 7}) {
    const std::vector<float> xm(x.begin(), x.begin() + m * k);
    const auto want = ReferenceGemm(dtype, xm, m, w, n, k);
    for (GemmIsa isa : CpuBodies()) {
      ASSERT_TRUE(SetGemmIsa(isa));
      std::vector<float> y(m * n, -1.f);
      Gemm<Device::kCpu>(xm.data(), m, *gw, y.data(), false, pool);
      EXPECT_EQ(0, std::memcmp(y.data(), want.data(), sizeof(float) * m * n))
          << Label(dtype, isa, m, k, n);
    }
  }
  ASSERT_TRUE(SetGemmIsa(BestGemmIsa()));
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<GemmShape, WeightDtype>>& info) {
  const auto [shape, dtype] = info.param;
  return std::string(WeightDtypeName(dtype)) + "_k" + std::to_string(shape.k) + "_n" +
         std::to_string(shape.n);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmInvariance,
                         ::testing::Combine(::testing::ValuesIn(ModelShapes()),
                                            ::testing::ValuesIn(AllDtypes())),
                         ParamName);

class GemmBodies : public ::testing::TestWithParam<WeightDtype> {};

// Ragged shapes cover partial panels, odd k (bf16 pairs), k not a multiple of 32 (int8 blocks),
// partial register blocks; m up to 200 crosses the 96-row tiles, and two threads split the tiles.
// n = 1000 is 16 panels, the last partial: several full and one partial group of the bodies that
// stream adjacent panels together (the integer AVX2 rows, the AVX2 batch-1 rows).
TEST_P(GemmBodies, EveryBodyComputesTheChain) {
  const WeightDtype dtype = GetParam();
  SerialParallel serial;
  PoolParallel pool(2);
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 384},
                         {5, 37, 100},
                         {13, 64, 64},
                         {200, 129, 130},
                         {7, 1, 65},
                         {97, 300, 20},
                         {4, 33, 3},
                         {3, 31, 64},
                         {1, 96, 1000},
                         {2, 200, 1000}}) {
    const auto x = Random(m * k, 11), w = Random(n * k, 12), y0 = Random(m * n, 13);
    const auto want = ReferenceGemm(dtype, x, m, w, n, k);
    const auto want_acc = ReferenceGemm(dtype, x, m, w, n, k, &y0);
    const PackedWeight packed = PackedWeight::Pack(w.data(), n, k, dtype);
    ASSERT_EQ(packed.dtype(), dtype);
    for (GemmIsa isa : CpuBodies()) {
      ASSERT_TRUE(SetGemmIsa(isa));
      for (const Parallel* par : {static_cast<const Parallel*>(&serial),
                                  static_cast<const Parallel*>(&pool)}) {
        std::vector<float> y(m * n, -1.f), acc = y0;
        GemmPacked(x.data(), m, packed, y.data(), false, *par);
        GemmPacked(x.data(), m, packed, acc.data(), true, *par);
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), sizeof(float) * m * n))
            << Label(dtype, isa, m, k, n);
        EXPECT_EQ(0, std::memcmp(acc.data(), want_acc.data(), sizeof(float) * m * n))
            << "accumulate " << Label(dtype, isa, m, k, n);
      }
    }
  }
  ASSERT_TRUE(SetGemmIsa(BestGemmIsa()));
}

// Quantised weights stay close to the f32 product, row by row: relative L2 error of a row of y
// against the double-precision product, on model shapes with GPT-2-like weights (std 0.02) and
// unit activations. Measured here: bf16 0.17 %, int8 0.77 %; bf16dot (activations rounded too)
// in the rel_err properties.
TEST_P(GemmBodies, CloseToF32Product) {
  const WeightDtype dtype = GetParam();
  const double bound = dtype == WeightDtype::kF32       ? 1e-5
                       : dtype == WeightDtype::kBf16    ? 0.004
                       : dtype == WeightDtype::kInt8    ? 0.015
                       : dtype == WeightDtype::kBf16Dot ? 0.008
                                                        : 0.2;
  SerialParallel serial;
  for (const GemmShape& s : {GemmShape{768, 2304}, GemmShape{3072, 768}, GemmShape{128, 512}}) {
    const int64_t m = 4;
    const auto w = Random(s.n * s.k, 31, 0.02f), x = Random(m * s.k, 32);
    const auto gw = PrepareGemmWeight<Device::kCpu>(w.data(), s.n, s.k, {dtype});
    ASSERT_TRUE(gw.ok()) << gw.status();
    std::vector<float> y(m * s.n);
    Gemm<Device::kCpu>(x.data(), m, *gw, y.data(), false, serial);
    double worst = 0;
    for (int64_t i = 0; i < m; ++i) {
      double err = 0, norm = 0;
      for (int64_t j = 0; j < s.n; ++j) {
        double ref = 0;
        for (int64_t kk = 0; kk < s.k; ++kk) ref += double(x[i * s.k + kk]) * w[j * s.k + kk];
        err += (y[i * s.n + j] - ref) * (y[i * s.n + j] - ref);
        norm += ref * ref;
      }
      worst = std::max(worst, std::sqrt(err / norm));
    }
    EXPECT_LE(worst, bound) << WeightDtypeName(dtype) << " k=" << s.k << " n=" << s.n;
    RecordProperty(std::string("rel_err_k") + std::to_string(s.k) + "_n" + std::to_string(s.n),
                   std::to_string(worst));
  }
}

// A weight stored as bf16 (a torch_dtype bfloat16 model file) prepares, for every type, into
// exactly the weight PrepareGemmWeight makes from its widened fp32 values, panel byte for panel
// byte; as kBf16 it is also the weight of the fp32 original it was rounded from (the rounding is
// the same nearest-even), so a BF16 export computes the f32 model's --weight_dtype bf16 bits.
TEST_P(GemmBodies, Bf16SourcePreparesAsItsWidenedValues) {
  const WeightDtype dtype = GetParam();
  SerialParallel serial;
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{5, 37, 100},
                         {3, 129, 130},
                         {2, 768, 2304},
                         {1, 64, 1}}) {
    const auto w = Random(n * k, 51), x = Random(m * k, 52);
    std::vector<uint16_t> wb(n * k);
    std::vector<float> wide(n * k);
    for (int64_t i = 0; i < n * k; ++i) {
      wb[i] = Bf16FromFloat(w[i]);
      wide[i] = FloatFromBf16(wb[i]);
    }
    const auto from_bf16 = PrepareGemmWeightBf16<Device::kCpu>(wb.data(), n, k, {dtype});
    const auto from_wide = PrepareGemmWeight<Device::kCpu>(wide.data(), n, k, {dtype});
    ASSERT_TRUE(from_bf16.ok() && from_wide.ok()) << from_bf16.status() << from_wide.status();
    ASSERT_EQ(from_bf16->dtype, dtype);
    ASSERT_EQ(from_bf16->packed.bytes(), from_wide->packed.bytes());
    EXPECT_EQ(0, std::memcmp(from_bf16->packed.panel_data(0), from_wide->packed.panel_data(0),
                             from_wide->packed.bytes()))
        << WeightDtypeName(dtype) << " k=" << k << " n=" << n;
    if (dtype == WeightDtype::kBf16 || dtype == WeightDtype::kBf16Dot) {
      const auto from_f32 = PrepareGemmWeight<Device::kCpu>(w.data(), n, k, {dtype});
      ASSERT_TRUE(from_f32.ok());
      EXPECT_EQ(0, std::memcmp(from_bf16->packed.panel_data(0), from_f32->packed.panel_data(0),
                               from_f32->packed.bytes()))
          << "k=" << k << " n=" << n;
    }
    std::vector<float> y(m * n), want(m * n);
    Gemm<Device::kCpu>(x.data(), m, *from_bf16, y.data(), false, serial);
    Gemm<Device::kCpu>(x.data(), m, *from_wide, want.data(), false, serial);
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), sizeof(float) * m * n));
    // And kF32 on the widened bf16 weight is kBf16's chain: the same bits as bf16.
    if (dtype == WeightDtype::kF32) {
      const auto as_bf16 =
          PrepareGemmWeightBf16<Device::kCpu>(wb.data(), n, k, {WeightDtype::kBf16});
      ASSERT_TRUE(as_bf16.ok());
      std::vector<float> yb(m * n);
      Gemm<Device::kCpu>(x.data(), m, *as_bf16, yb.data(), false, serial);
      EXPECT_EQ(0, std::memcmp(y.data(), yb.data(), sizeof(float) * m * n));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GemmBodies, ::testing::ValuesIn(AllDtypes()),
                         [](const ::testing::TestParamInfo<WeightDtype>& info) {
                           return std::string(WeightDtypeName(info.param));
                         });

TEST(GemmIsaSelection, BestBodyIsSelectedByDefault) {
  if (std::getenv("FLATSTATE_ISA") != nullptr) {
    GTEST_SKIP() << "FLATSTATE_ISA is set: GemmIsaEnvironment checks the choice";
  }
  EXPECT_EQ(ActiveGemmIsa(), BestGemmIsa()) << GemmIsaName(ActiveGemmIsa());
  RecordProperty("gemm_isa", GemmIsaName(BestGemmIsa()));
  RecordProperty("gemm_int8_body", GemmBodyName(BestGemmIsa(), WeightDtype::kInt8));
}

TEST(WeightDtypes, NamesRoundTripAndUnknownNamesFail) {
  for (WeightDtype d : AllDtypes()) {
    auto parsed = ParseWeightDtype(WeightDtypeName(d));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(*ParseWeightDtype("BF16"), WeightDtype::kBf16);
  for (const char* bad : {"", "fp16", "int2", "q8_0"}) {
    auto parsed = ParseWeightDtype(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseWeightDtype("q4_0").status().message().find("f32, bf16, int8, int4 or bf16dot"),
            std::string::npos);
}

TEST(WeightDtypes, Bf16RoundsToNearestEven) {
  EXPECT_EQ(Bf16FromFloat(1.f), 0x3F80);
  EXPECT_EQ(FloatFromBf16(0x3F80), 1.f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even (1); just above goes up.
  EXPECT_EQ(Bf16FromFloat(1.f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(Bf16FromFloat(1.f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(Bf16FromFloat(1.f + 3 * 0x1p-8f), 0x3F82);  // halfway above an odd: up to even
  EXPECT_EQ(Bf16FromFloat(-2.f), 0xC000);
  EXPECT_EQ(Bf16FromFloat(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(Bf16FromFloat(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to Inf
  EXPECT_TRUE(std::isnan(FloatFromBf16(Bf16FromFloat(std::nanf("")))));
  EXPECT_TRUE(std::isnan(FloatFromBf16(Bf16FromFloat(std::bit_cast<float>(0x7F800001u)))));
}

// Bf16FromFloat is the nearest-even rule the test model writer (and torch's bfloat16 cast, which
// tools/export.py uses: tools/tests) applies: equal on edge values and on random bit patterns.
TEST(WeightDtypes, Bf16RoundingMatchesTheModelWriter) {
  std::vector<uint32_t> bits = {0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x3F808001u, 0x7F7FFFFFu,
                                0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u, 0x00008000u,
                                0x00018000u, 0x7F800001u, 0xFFC00000u, 0x807FFFFFu};
  std::mt19937 g(3);
  for (int i = 0; i < 1000000; ++i) bits.push_back(static_cast<uint32_t>(g()));
  for (uint32_t u : bits) {
    const float f = std::bit_cast<float>(u);
    ASSERT_EQ(Bf16FromFloat(f), testing::Bf16Bits(f)) << std::hex << u;
    ASSERT_EQ(std::bit_cast<uint32_t>(FloatFromBf16(Bf16FromFloat(f))),
              std::bit_cast<uint32_t>(testing::FromBf16Bits(testing::Bf16Bits(f))));
  }
}

TEST(WeightDtypes, Int4BlockQuantisation) {
  int8_t q[32];
  const float x[3] = {-0.7f, 0.25f, 0.05f};
  EXPECT_EQ(QuantizeBlockInt4(x, 3, q), 0.7f / 7.f);
  EXPECT_EQ(q[0], -7);
  EXPECT_EQ(q[1], 2);  // 2.5 to the even neighbour
  EXPECT_EQ(q[2], 0);  // 0.5 to the even neighbour
  for (int t = 3; t < 32; ++t) EXPECT_EQ(q[t], 0) << t;
}

TEST(WeightDtypes, Int8BlockQuantisation) {
  int8_t q[32];
  const float x[4] = {1.27f, -0.635f, 0.f, 0.005f};
  const float scale = QuantizeBlockInt8(x, 4, q);
  EXPECT_EQ(scale, 1.27f / 127.f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -64);  // -63.5 to the even neighbour
  EXPECT_EQ(q[2], 0);
  EXPECT_EQ(q[3], 0);  // 0.5 to the even neighbour
  for (int t = 4; t < 32; ++t) EXPECT_EQ(q[t], 0) << t;
  const float zeros[3] = {0.f, -0.f, 0.f};
  EXPECT_EQ(QuantizeBlockInt8(zeros, 3, q), 0.f);
  const float bad[2] = {1.f, std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(std::isnan(QuantizeBlockInt8(bad, 2, q)));
}

// A non-finite activation or weight gives NaN outputs, as with f32 weights, never a finite guess.
// kBf16Dot near the bottom of the fp32 range: products and sums around 2^-126 and subnormal
// weights and activations, where vdpbf16ps flushes (kernels/gemm.h). Every body this CPU has
// (the AVX512-BF16 instruction itself where it exists) equals the flushing definition, and the
// flushing happens: a weight whose bf16 is subnormal contributes nothing.
TEST(WeightDtypes, Bf16DotFlushesSubnormalsLikeTheInstruction) {
  const int64_t m = 7, k = 67, n = 130;
  auto x = Random(m * k, 61), w = Random(n * k, 62);
  std::mt19937 g(63);
  for (float& v : x) v = std::ldexp(v, -60 - static_cast<int>(g() % 8));
  for (float& v : w) v = std::ldexp(v, -62 - static_cast<int>(g() % 8));
  for (int64_t i = 0; i < n * k; i += 5) w[i] = std::ldexp(w[i], -70);  // subnormal in bf16
  const auto want = ReferenceGemm(WeightDtype::kBf16Dot, x, m, w, n, k);
  const PackedWeight packed = PackedWeight::Pack(w.data(), n, k, WeightDtype::kBf16Dot);
  SerialParallel serial;
  for (GemmIsa isa : CpuBodies()) {
    ASSERT_TRUE(SetGemmIsa(isa));
    std::vector<float> y(m * n, -1.f);
    GemmPacked(x.data(), m, packed, y.data(), false, serial);
    EXPECT_EQ(0, std::memcmp(y.data(), want.data(), sizeof(float) * m * n))
        << Label(WeightDtype::kBf16Dot, isa, m, k, n);
  }
  ASSERT_TRUE(SetGemmIsa(BestGemmIsa()));
  int64_t zeros = 0;
  for (float v : want) zeros += v == 0.f;
  EXPECT_GT(zeros, 0);  // some results flushed whole
  // One column whose weights are all subnormal bf16 gives exactly zero.
  std::vector<float> tiny(k, std::ldexp(1.f, -130)), ones(k, 1.f);
  const PackedWeight t = PackedWeight::Pack(tiny.data(), 1, k, WeightDtype::kBf16Dot);
  float y = -1.f;
  GemmPacked(ones.data(), 1, t, &y, false, serial);
  EXPECT_EQ(y, 0.f);
}

TEST(WeightDtypes, NonFiniteValuesGiveNaN) {
  const int64_t k = 64, n = 8;
  auto w = Random(n * k, 41);
  auto x = Random(2 * k, 42);
  x[5] = std::numeric_limits<float>::infinity();  // row 0 only
  w[3 * k + 40] = std::nanf("");                  // column 3 only
  SerialParallel serial;
  for (WeightDtype dtype : AllDtypes()) {
    const auto gw = PrepareGemmWeight<Device::kCpu>(w.data(), n, k, {dtype});
    ASSERT_TRUE(gw.ok());
    std::vector<float> y(2 * n);
    Gemm<Device::kCpu>(x.data(), 2, *gw, y.data(), false, serial);
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(std::isnan(y[j]) || (dtype != WeightDtype::kInt8 && std::isinf(y[j])))
          << WeightDtypeName(dtype) << " row 0 col " << j;
      EXPECT_EQ(std::isnan(y[n + j]), j == 3) << WeightDtypeName(dtype) << " row 1 col " << j;
    }
  }
}

}  // namespace
}  // namespace flatstate::testing

namespace flatstate {
namespace {

// FLATSTATE_ISA picks the bodies at start (kernels/gemm.h). ctest runs this binary's tests once
// as discovered (variable unset: the best body) and once more as gemm_isa_env with
// FLATSTATE_ISA=avx2 (tests/CMakeLists.txt).
TEST(GemmIsaEnvironment, ActiveIsaFollowsFlatstateIsa) {
  const char* env = std::getenv("FLATSTATE_ISA");
  if (env == nullptr) {
    EXPECT_EQ(ActiveGemmIsa(), BestGemmIsa());
    EXPECT_EQ(IsaFromEnvironment(), "");
    return;
  }
  ASSERT_EQ(std::string(env), "avx2");
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    EXPECT_EQ(ActiveGemmIsa(), BestGemmIsa());
    EXPECT_THAT(IsaFromEnvironment(), ::testing::HasSubstr("ignored"));
    return;
  }
  EXPECT_EQ(ActiveGemmIsa(), GemmIsa::kAvx2);
  EXPECT_EQ(IsaFromEnvironment(), "avx2 (from FLATSTATE_ISA)");
}

}  // namespace
}  // namespace flatstate
