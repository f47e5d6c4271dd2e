// Weights that arrive already quantised (kernels/gemm.h: QuantizedWeightView, the stored int8 /
// int4 layout of a model file; kernels/cpu/gemm_stored.cc): packing the stored quants and scales
// gives exactly the panels that quantising the fp32 values at load gives, the stored layout is
// the model writer's (tests/util/model_writer.cc, written independently), and
// PrepareGemmWeightQuantized prepares each type as documented.
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/gemm.h"
#include "tests/kernels/gemm_test_util.h"
#include "tests/util/model_writer.h"

namespace flatstate::testing {
namespace {

struct Shape {
  int64_t n, k;
};

// Panel edges (n around 64), block edges (k around 32), odd k (int4's pad nibble), one column.
const std::vector<Shape>& Shapes() {
  static const std::vector<Shape> s = {{1, 1},    {3, 31}, {64, 32},   {65, 33},
                                       {130, 77}, {7, 64}, {200, 128}, {5, 95}};
  return s;
}

// Random values with the cases the rounding rule has to get right: an all-zero block, and a row
// whose first block has max 127 (int8 scale 1) or 7 (int4 scale 1) and exact halves (ties).
std::vector<float> Weights(const Shape& s, WeightDtype dtype, uint32_t seed) {
  std::vector<float> w = Random(static_cast<size_t>(s.n * s.k), seed, 0.05f);
  if (s.n >= 3 && s.k >= 8) {
    for (int64_t kk = 0; kk < std::min<int64_t>(s.k, 32); ++kk) w[1 * s.k + kk] = 0.f;
    const float top = dtype == WeightDtype::kInt4 ? 7.f : 127.f;
    const float ties[] = {top, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -6.5f};
    for (int64_t kk = 0; kk < 7; ++kk) w[2 * s.k + kk] = ties[kk];
    for (int64_t kk = 7; kk < std::min<int64_t>(s.k, 32); ++kk) w[2 * s.k + kk] = 0.25f;
  }
  return w;
}

bool SameBytes(const PackedWeight& a, const PackedWeight& b) {
  return a.dtype() == b.dtype() && a.bytes() == b.bytes() &&
         std::memcmp(a.panel_data(0), b.panel_data(0), a.bytes()) == 0;
}

bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class StoredQuant : public ::testing::TestWithParam<WeightDtype> {};

TEST_P(StoredQuant, PackingStoredQuantsEqualsPackingTheFloats) {
  const WeightDtype dtype = GetParam();
  for (const Shape& s : Shapes()) {
    const std::vector<float> w = Weights(s, dtype, 11);
    const QuantizedWeight q = QuantizeWeight(w.data(), s.n, s.k, dtype);
    ASSERT_EQ(static_cast<int64_t>(q.q.size()), s.n * QuantizedRowBytes(dtype, s.k));
    ASSERT_EQ(static_cast<int64_t>(q.scales.size()), s.n * QuantizedBlocks(s.k));
    EXPECT_TRUE(SameBytes(PackedWeight::PackQuantized(q.view()),
                          PackedWeight::Pack(w.data(), s.n, s.k, dtype)))
        << WeightDtypeName(dtype) << " n " << s.n << " k " << s.k;
  }
}

// QuantizeWeight's quants and scales are byte for byte the layout the model writer stores (its
// own implementation of the rule of docs/model-format.md), ties to even included.
TEST_P(StoredQuant, QuantsAndScalesAreTheModelWritersLayout) {
  const WeightDtype dtype = GetParam();
  for (const Shape& s : Shapes()) {
    const std::vector<float> w = Weights(s, dtype, 12);
    const QuantizedWeight q = QuantizeWeight(w.data(), s.n, s.k, dtype);
    NamedTensor t{"w", {s.n, s.k}, w};
    t.quantized = dtype == WeightDtype::kInt4 ? TorchDtype::kInt4 : TorchDtype::kInt8;
    const std::vector<NamedTensor> stored = ExpandQuantized({t});
    ASSERT_EQ(stored.size(), 2u);
    EXPECT_EQ(stored[0].raw, std::string(q.q.begin(), q.q.end()))
        << WeightDtypeName(dtype) << " n " << s.n << " k " << s.k;
    EXPECT_EQ(stored[1].name, "w_scale");
    EXPECT_TRUE(SameFloats(stored[1].data, q.scales));
    std::vector<float> deq(w.size());
    DequantizeWeight(q.view(), deq.data());
    EXPECT_TRUE(SameFloats(deq, DequantizedValues(t)));
  }
  // The tie row, spelled out: scale 1, halves to even.
  const Shape s{3, 8};
  const std::vector<float> w = Weights(s, dtype, 13);
  const QuantizedWeight q = QuantizeWeight(w.data(), s.n, s.k, dtype);
  EXPECT_EQ(q.scales[2], 1.f);
  std::vector<float> deq(w.size());
  DequantizeWeight(q.view(), deq.data());
  const float top = dtype == WeightDtype::kInt4 ? 7.f : 127.f;
  const std::vector<float> want = {top, 2.f, -4.f, 0.f, -0.f, 2.f, -6.f, 0.f};
  for (int64_t kk = 0; kk < 8; ++kk) EXPECT_EQ(deq[2 * 8 + kk], want[kk]) << kk;
}

TEST_P(StoredQuant, ConcatRowsIsTheQuantisationOfTheConcatenation) {
  const WeightDtype dtype = GetParam();
  const std::vector<float> a = Random(9 * 77, 14), b = Random(4 * 77, 15);
  std::vector<float> ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  const QuantizedWeight qa = QuantizeWeight(a.data(), 9, 77, dtype);
  const QuantizedWeight qb = QuantizeWeight(b.data(), 4, 77, dtype);
  const QuantizedWeight cat = ConcatRows(qa.view(), qb.view());
  const QuantizedWeight want = QuantizeWeight(ab.data(), 13, 77, dtype);
  EXPECT_EQ(cat.n, 13);
  EXPECT_EQ(cat.q, want.q);
  EXPECT_TRUE(SameFloats(cat.scales, want.scales));
}

TEST_P(StoredQuant, UnpackedQuantsArePaddedPerBlock) {
  const WeightDtype dtype = GetParam();
  const Shape s{5, 45};
  const std::vector<float> w = Random(s.n * s.k, 16);
  const QuantizedWeight q = QuantizeWeight(w.data(), s.n, s.k, dtype);
  std::vector<int8_t> padded(s.n * 64, 99);
  UnpackQuants(q.view(), padded.data());
  for (int64_t j = 0; j < s.n; ++j) {
    int8_t block[32];
    for (int64_t b = 0; b < 2; ++b) {
      const float scale = dtype == WeightDtype::kInt4
                              ? QuantizeBlockInt4(w.data() + j * s.k + b * 32,
                                                  std::min<int64_t>(32, s.k - b * 32), block)
                              : QuantizeBlockInt8(w.data() + j * s.k + b * 32,
                                                  std::min<int64_t>(32, s.k - b * 32), block);
      EXPECT_EQ(scale, q.scales[j * 2 + b]);
      for (int64_t t = 0; t < 32; ++t) EXPECT_EQ(padded[j * 64 + b * 32 + t], block[t]);
    }
  }
}

// Prepared as its own type the stored weight multiplies exactly as its fp32 original prepared as
// that type; as f32 / bf16 exactly as its dequantised values; as the other integer type: refused.
TEST_P(StoredQuant, PrepareAsEachType) {
  const WeightDtype dtype = GetParam();
  PoolParallel par(2);
  const int64_t m = 7, n = 70, k = 77;
  const std::vector<float> w = Random(n * k, 17), x = Random(m * k, 18);
  const QuantizedWeight q = QuantizeWeight(w.data(), n, k, dtype);
  std::vector<float> deq(w.size());
  DequantizeWeight(q.view(), deq.data());
  auto run = [&](const GemmWeight<Device::kCpu>& gw) {
    std::vector<float> y(m * n);
    Gemm<Device::kCpu>(x.data(), m, gw, y.data(), false, par);
    return y;
  };
  QuantizedWeightView not_int = q.view();
  not_int.dtype = WeightDtype::kBf16;
  EXPECT_EQ(PrepareGemmWeightQuantized<Device::kCpu>(not_int, {WeightDtype::kBf16}).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (WeightDtype as : AllDtypes()) {
    auto stored = PrepareGemmWeightQuantized<Device::kCpu>(q.view(), {as});
    const bool other_int = as != dtype && (as == WeightDtype::kInt8 || as == WeightDtype::kInt4);
    if (other_int) {
      ASSERT_EQ(stored.status().code(), absl::StatusCode::kInvalidArgument);
      const std::string msg(stored.status().message());
      EXPECT_NE(msg.find(std::string("stored as ") + WeightDtypeName(dtype)), std::string::npos);
      EXPECT_NE(msg.find(std::string("as ") + WeightDtypeName(as)), std::string::npos) << msg;
      continue;
    }
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(stored->dtype, as);
    auto ref = PrepareGemmWeight<Device::kCpu>(as == dtype ? w.data() : deq.data(), n, k, {as});
    ASSERT_TRUE(ref.ok());
    EXPECT_TRUE(SameBytes(stored->packed, ref->packed)) << WeightDtypeName(as);
    EXPECT_TRUE(SameFloats(run(*stored), run(*ref))) << WeightDtypeName(as);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, StoredQuant,
                         ::testing::Values(WeightDtype::kInt8, WeightDtype::kInt4),
                         [](const ::testing::TestParamInfo<WeightDtype>& info) {
                           return std::string(WeightDtypeName(info.param));
                         });

}  // namespace
}  // namespace flatstate::testing
