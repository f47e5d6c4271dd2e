// The CPU body of PagedAttention (kernels/paged_attention.h), both K/V dtypes: against a float64
// softmax over the whole context written here (K/V as the pool holds them), and bit-identical
// rows whatever the query tiling (a prefill in one call, row by row, interleaved with another
// session), the pool's block size, or the thread count.
#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "engine/kv/kv_block_pool.h"
#include "engine/util/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/gemm.h"

namespace flatstate::testing {
namespace {

// The shape of a case: kHd 8 runs the scalar body everywhere; 64 (GPT-2's) and 32 run the
// AVX-512 body on CPUs that have it.
struct Shape {
  KvDtype dtype;
  int heads, hd;
};
// Set by each test from its parameter (Session and the reference read them).
int kHeads = 3, kHd = 8, kHidden = kHeads * kHd, kStride = 3 * kHidden;
void UseShape(const Shape& s) {
  kHeads = s.heads;
  kHd = s.hd;
  kHidden = kHeads * kHd;
  kStride = 3 * kHidden;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// A session of T tokens in a pool of block size `bs` with K/V rows from `kv_rows` ([T][2][D]);
// its table is shuffled so blocks are not in order.
struct Session {
  KvBlockPool pool;
  std::vector<int32_t> table;
  Session(int bs, KvDtype dtype, const std::vector<float>& kv_rows, int64_t T, uint32_t seed)
      : pool(static_cast<int>((T + bs - 1) / bs) + 2, bs, 1, kHidden, dtype) {
    std::vector<int32_t> ids(pool.blocks_total());
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    table.assign(ids.begin(), ids.begin() + (T + bs - 1) / bs);
    for (int64_t t = 0; t < T; ++t) {
      for (int kv = 0; kv < 2; ++kv) {
        pool.WriteRow(table[t / bs], 0, kv, static_cast<int>(t % bs),
                      kv_rows.data() + (t * 2 + kv) * kHidden);
      }
    }
  }
  // Runs PagedAttention over query rows (qkv row r, context ctx) given as PagedRows.
  std::vector<float> Attend(const std::vector<float>& qkv, const std::vector<PagedRow>& rows,
                            int64_t out_rows, const Parallel& par) {
    std::vector<float> out(out_rows * kHidden, -1.f);
    PagedAttention<Device::kCpu>(pool.view(), table.data(), rows.data(),
                                 static_cast<int64_t>(rows.size()), qkv.data(), kStride, out.data(),
                                 kHidden, 0, AttentionShape{kHeads, kHeads, kHd}, par);
    return out;
  }
};

class PagedAttentionTest : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override { UseShape(GetParam()); }
  void TearDown() override { SetGemmIsa(BestGemmIsa()); }
};

TEST_P(PagedAttentionTest, MatchesFloat64AndEveryTilingGivesTheSameBits) {
  const KvDtype dtype = GetParam().dtype;
  const int64_t T = 70;
  const auto kv_rows = Random(T * 2 * kHidden, 1), qkv = Random(T * kStride, 2);
  Session s16(16, dtype, kv_rows, T, 3);
  SerialParallel serial;
  // A prefill of all T rows in one call: row t at context t + 1.
  std::vector<PagedRow> all;
  for (int64_t t = 0; t < T; ++t) all.push_back(PagedRow{t, t + 1, 0});
  const std::vector<float> whole = s16.Attend(qkv, all, T, serial);

  // float64 reference over the rows the pool holds (widened).
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < kHeads; ++h) {
      std::vector<double> sc;
      double mx = -1e300, sum = 0;
      std::vector<float> k(kHidden), v(kHidden);
      for (int64_t j = 0; j <= t; ++j) {
        s16.pool.ReadRow(s16.table[j / 16], 0, 0, static_cast<int>(j % 16), k.data());
        double d = 0;
        for (int i = 0; i < kHd; ++i) d += double(qkv[t * kStride + h * kHd + i]) * k[h * kHd + i];
        sc.push_back(d / std::sqrt(double(kHd)));
        mx = std::max(mx, sc.back());
      }
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int i = 0; i < kHd; ++i) {
        double o = 0;
        for (int64_t j = 0; j <= t; ++j) {
          s16.pool.ReadRow(s16.table[j / 16], 0, 1, static_cast<int>(j % 16), v.data());
          o += sc[j] / sum * v[h * kHd + i];
        }
        ASSERT_NEAR(whole[t * kHidden + h * kHd + i], o, 2e-6) << "t " << t << " h " << h;
      }
    }
  }

  // Row by row (decode-like calls), in reverse order.
  std::vector<float> single(T * kHidden);
  for (int64_t t = T - 1; t >= 0; --t) {
    const std::vector<float> one = s16.Attend(qkv, {PagedRow{t, t + 1, 0}}, T, serial);
    std::copy(one.begin() + t * kHidden, one.begin() + (t + 1) * kHidden,
              single.begin() + t * kHidden);
  }
  EXPECT_EQ(single, whole);

  // Interleaved with another session's rows (tiles break at every switch), on 3 threads' worth
  // of tasks, and in a pool with block size 4.
  Session s4(4, dtype, kv_rows, T, 9);
  std::vector<PagedRow> mixed;
  std::vector<int32_t> tables = s4.table;
  tables.insert(tables.end(), s4.table.begin(), s4.table.end());
  for (int64_t t = 0; t < T; ++t) {
    mixed.push_back(PagedRow{t, t + 1, 0});
    if (t % 7 == 3) mixed.push_back(PagedRow{t, t + 1, static_cast<int64_t>(s4.table.size())});
  }
  std::vector<float> out(T * kHidden);
  PagedAttention<Device::kCpu>(s4.pool.view(), tables.data(), mixed.data(),
                               static_cast<int64_t>(mixed.size()), qkv.data(), kStride, out.data(),
                               kHidden, 0, AttentionShape{kHeads, kHeads, kHd}, serial);
  EXPECT_EQ(out, whole);
}

TEST_P(PagedAttentionTest, Bf16WriteRoundsLikeThePool) {
  const KvDtype dtype = GetParam().dtype;
  KvBlockPool pool(2, 4, 1, kHidden, dtype);
  std::vector<int32_t> table = {1};
  auto qkv = Random(kStride, 5);
  const std::vector<PagedRow> rows = {PagedRow{0, 3, 0}};  // position 2
  SerialParallel serial;
  const std::vector<double> inv = RopeInvFreq(10000.0, kHd);
  RopeAndWriteKv<Device::kCpu>(pool.view(), table.data(), rows.data(), 1, qkv.data(), kStride, 0,
                               AttentionShape{kHeads, kHeads, kHd}, RopeTable{inv.data(), kHd},
                               serial);
  std::vector<float> k(kHidden), v(kHidden), want(kHidden);
  pool.ReadRow(1, 0, 0, 2, k.data());
  pool.ReadRow(1, 0, 1, 2, v.data());
  KvBlockPool ref(1, 1, 1, kHidden, dtype);
  ref.WriteRow(0, 0, 0, 0, qkv.data() + kHidden);  // the rotated k, rounded by the pool's rule
  ref.ReadRow(0, 0, 0, 0, want.data());
  EXPECT_EQ(k, want);
  ref.WriteRow(0, 0, 0, 0, qkv.data() + 2 * kHidden);
  ref.ReadRow(0, 0, 0, 0, want.data());
  EXPECT_EQ(v, want);
}

// Every vector body this CPU runs (selected with the GEMM's, SetGemmIsa) gives the scalar body's
// bits: a prefill in one call, decode rows, and pools whose blocks are or are not a multiple of
// the key group. Each body is checked on its own: a CPU without AVX-512 still checks AVX2.
TEST_P(PagedAttentionTest, VectorBodiesGiveTheScalarBodysBits) {
  const KvDtype dtype = GetParam().dtype;
  const int64_t T = 83;
  const auto kv_rows = Random(T * 2 * kHidden, 11), qkv = Random(T * kStride, 12);
  SerialParallel serial;
  std::vector<PagedRow> all;
  for (int64_t t = 0; t < T; ++t) all.push_back(PagedRow{t, t + 1, 0});
  const std::vector<PagedRow> decode = {PagedRow{T - 1, T, 0}, PagedRow{5, 6, 0}};
  int checked = 0;
  for (GemmIsa isa : {GemmIsa::kAvx512, GemmIsa::kAvx2}) {
    if (!SetGemmIsa(isa)) continue;
    ++checked;
    for (int bs : {16, 32, 5}) {
      Session s(bs, dtype, kv_rows, T, 13);
      ASSERT_TRUE(SetGemmIsa(isa));
      const std::vector<float> fast = s.Attend(qkv, all, T, serial);
      const std::vector<float> fast_decode = s.Attend(qkv, decode, T, serial);
      ASSERT_TRUE(SetGemmIsa(GemmIsa::kScalar));
      EXPECT_EQ(s.Attend(qkv, all, T, serial), fast) << GemmIsaName(isa) << " block size " << bs;
      EXPECT_EQ(s.Attend(qkv, decode, T, serial), fast_decode)
          << GemmIsaName(isa) << " block size " << bs;
    }
  }
  if (checked == 0) GTEST_SKIP() << "this CPU has neither AVX-512F nor AVX2 + FMA";
}

// Large and small scores (a softmax that underflows most keys) stay finite and match float64.
TEST_P(PagedAttentionTest, PeakedScoresStayFinite) {
  const KvDtype dtype = GetParam().dtype;
  const int64_t T = 40;
  auto kv_rows = Random(T * 2 * kHidden, 21);
  for (float& x : kv_rows) x *= 30.f;  // scores of order 30^2 * hd / sqrt(hd)
  const auto qkv = Random(T * kStride, 22);
  Session s(16, dtype, kv_rows, T, 23);
  SerialParallel serial;
  const std::vector<float> out = s.Attend(qkv, {PagedRow{T - 1, T, 0}}, T, serial);
  for (int d = 0; d < kHidden; ++d) ASSERT_TRUE(std::isfinite(out[(T - 1) * kHidden + d])) << d;
}

// Grouped-query attention: heads 8 over K/V heads 2 give, on every body and bit for bit, what
// multi-head attention gives with each K/V head repeated for its 4 query heads (the pool then
// holds the repeated rows). hd 8 runs the scalar body; 32 the vector bodies where the CPU has them.
TEST(PagedAttentionGqa, EqualsMultiHeadWithRepeatedKvHeadsOnEveryBody) {
  for (int hd : {8, 32}) {
    const int H = 8, KVH = 2, g = H / KVH, T = 37, bs = 16;
    const int qw = H * hd, kvw = KVH * hd;
    const auto kv_rows = Random(static_cast<size_t>(T) * 2 * kvw, 31);
    const auto q = Random(static_cast<size_t>(T) * qw, 32);
    KvBlockPool gqa((T + bs - 1) / bs, bs, 1, kvw, KvDtype::kF32);
    KvBlockPool mha((T + bs - 1) / bs, bs, 1, qw, KvDtype::kF32);
    std::vector<int32_t> table((T + bs - 1) / bs);
    std::iota(table.begin(), table.end(), 0);
    std::vector<float> rep(qw);
    for (int t = 0; t < T; ++t) {
      for (int kv = 0; kv < 2; ++kv) {
        const float* row = kv_rows.data() + (static_cast<size_t>(t) * 2 + kv) * kvw;
        gqa.WriteRow(table[t / bs], 0, kv, t % bs, row);
        for (int h = 0; h < H; ++h) std::copy(row + (h / g) * hd, row + (h / g + 1) * hd,
                                              rep.begin() + h * hd);
        mha.WriteRow(table[t / bs], 0, kv, t % bs, rep.data());
      }
    }
    std::vector<PagedRow> rows;
    for (int t = 0; t < T; ++t) rows.push_back(PagedRow{t, t + 1, 0});
    PoolParallel par(2);
    for (GemmIsa isa : {GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
      if (!SetGemmIsa(isa)) continue;
      std::vector<float> got(static_cast<size_t>(T) * qw), want(got.size());
      PagedAttention<Device::kCpu>(gqa.view(), table.data(), rows.data(), T, q.data(), qw,
                                   got.data(), qw, 0, AttentionShape{H, KVH, hd}, par);
      PagedAttention<Device::kCpu>(mha.view(), table.data(), rows.data(), T, q.data(), qw,
                                   want.data(), qw, 0, AttentionShape{H, H, hd}, par);
      EXPECT_EQ(got, want) << GemmIsaName(isa) << " hd " << hd;
    }
    SetGemmIsa(BestGemmIsa());
  }
}

// RopeAndWriteKv with grouped K/V heads and a partial rotary: q's 4 heads and k's 2 heads rotate
// their first rotary_dim elements only, and the pool gets k (from q_width on) and v after it.
TEST(PagedAttentionGqa, RopeRotatesTheRotaryPartAndWritesGroupedKv) {
  const int H = 4, KVH = 2, hd = 8, rd = 4, qw = H * hd, kvw = KVH * hd, stride = qw + 2 * kvw;
  const auto x = Random(stride, 41);
  std::vector<float> row = x;
  KvBlockPool pool(1, 4, 1, kvw, KvDtype::kF32);
  const std::vector<int32_t> table = {0};
  const std::vector<PagedRow> rows = {PagedRow{0, 3, 0}};  // position 2
  const std::vector<double> inv = RopeInvFreq(500.0, rd);
  SerialParallel serial;
  RopeAndWriteKv<Device::kCpu>(pool.view(), table.data(), rows.data(), 1, row.data(), stride, 0,
                               AttentionShape{H, KVH, hd}, RopeTable{inv.data(), rd}, serial);
  for (int head = 0; head < H + KVH; ++head) {
    const float* in = x.data() + head * hd;
    const float* out = row.data() + head * hd;
    for (int i = 0; i < rd / 2; ++i) {
      const double a = 2.0 * std::pow(500.0, -2.0 * i / rd);
      EXPECT_NEAR(out[i], in[i] * std::cos(a) - in[i + rd / 2] * std::sin(a), 1e-5);
      EXPECT_NEAR(out[i + rd / 2], in[i + rd / 2] * std::cos(a) + in[i] * std::sin(a), 1e-5);
    }
    for (int i = rd; i < hd; ++i) EXPECT_EQ(out[i], in[i]) << "head " << head << " elem " << i;
  }
  std::vector<float> k(kvw), v(kvw);
  pool.ReadRow(0, 0, 0, 2, k.data());
  pool.ReadRow(0, 0, 1, 2, v.data());
  EXPECT_EQ(k, std::vector<float>(row.begin() + qw, row.begin() + qw + kvw));
  EXPECT_EQ(v, std::vector<float>(x.begin() + qw + kvw, x.end()));
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Values(Shape{KvDtype::kF32, 3, 8}, Shape{KvDtype::kBf16, 3, 8},
                                           Shape{KvDtype::kF32, 3, 64},
                                           Shape{KvDtype::kBf16, 3, 64},
                                           Shape{KvDtype::kF32, 2, 32},
                                           // Qwen3.5's head (16 vectors), and 9 vectors.
                                           Shape{KvDtype::kF32, 2, 256},
                                           Shape{KvDtype::kBf16, 2, 256},
                                           Shape{KvDtype::kF32, 1, 144}),
                         [](const ::testing::TestParamInfo<Shape>& i) {
                           return std::string(KvDtypeName(i.param.dtype)) + "_hd" +
                                  std::to_string(i.param.hd);
                         });

}  // namespace
}  // namespace flatstate::testing
