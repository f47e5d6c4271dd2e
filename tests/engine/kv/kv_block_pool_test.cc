#include "engine/kv/kv_block_pool.h"

#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using ::testing::HasSubstr;

TEST(KvBlockPoolTest, Sizes) {
  KvBlockPool pool(10, 16, 3, 8);
  EXPECT_EQ(pool.block_size(), 16);
  EXPECT_EQ(pool.num_layers(), 3);
  EXPECT_EQ(pool.hidden(), 8);
  EXPECT_EQ(pool.blocks_total(), 10);
  EXPECT_EQ(pool.blocks_free(), 10);
  EXPECT_EQ(pool.blocks_used(), 0);
  EXPECT_EQ(pool.bytes_per_block(), size_t{2 * 3 * 16 * 8 * 4});
  EXPECT_EQ(pool.bytes_total(), 10 * pool.bytes_per_block());
  EXPECT_EQ(pool.bytes_used(), 0u);
}

TEST(KvBlockPoolTest, ReserveCoversCeilTokensOverBlockSize) {
  for (int64_t n : {1, 15, 16, 17, 100}) {
    KvBlockPool pool(16, 16, 2, 4);
    std::vector<int32_t> table;
    ASSERT_TRUE(pool.Reserve(&table, n).ok()) << n;
    const size_t want = static_cast<size_t>((n + 15) / 16);
    EXPECT_EQ(table.size(), want) << n;
    EXPECT_EQ(pool.blocks_used(), static_cast<int>(want));
    for (size_t i = 0; i < table.size(); ++i) EXPECT_EQ(table[i], static_cast<int32_t>(i));
    // Reserving the same or fewer tokens is a no-op.
    ASSERT_TRUE(pool.Reserve(&table, n).ok());
    ASSERT_TRUE(pool.Reserve(&table, 0).ok());
    EXPECT_EQ(table.size(), want);
  }
}

TEST(KvBlockPoolTest, ReserveGrowsIncrementally) {
  KvBlockPool pool(8, 4, 1, 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.Reserve(&a, 3).ok());
  ASSERT_TRUE(pool.Reserve(&b, 5).ok());
  ASSERT_TRUE(pool.Reserve(&a, 9).ok());
  EXPECT_EQ(a, (std::vector<int32_t>{0, 3, 4}));
  EXPECT_EQ(b, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(pool.blocks_free(), 3);
}

TEST(KvBlockPoolTest, ExhaustionIsAllOrNothing) {
  KvBlockPool pool(4, 16, 2, 4);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.Reserve(&a, 40).ok());  // 3 blocks
  std::vector<int32_t> b = {};
  absl::Status s = pool.Reserve(&b, 33);  // needs 3, 1 free
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("KV block pool exhausted: need 3 more blocks, 1 free of 4"));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.blocks_free(), 1);

  // Growing an existing table past the pool leaves it unchanged too.
  const std::vector<int32_t> before = a;
  s = pool.Reserve(&a, 16 * 6);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a, before);
  EXPECT_EQ(pool.blocks_free(), 1);
}

TEST(KvBlockPoolTest, NegativeTokensRejected) {
  KvBlockPool pool(4, 16, 2, 4);
  std::vector<int32_t> t;
  EXPECT_EQ(pool.Reserve(&t, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(t.empty());
}

TEST(KvBlockPoolTest, ReleaseRestoresAndLowestIdsGoFirst) {
  KvBlockPool pool(6, 2, 1, 2);
  std::vector<int32_t> a, b, c;
  ASSERT_TRUE(pool.Reserve(&a, 4).ok());  // 0, 1
  ASSERT_TRUE(pool.Reserve(&b, 4).ok());  // 2, 3
  ASSERT_TRUE(pool.Reserve(&c, 4).ok());  // 4, 5
  EXPECT_EQ(pool.blocks_free(), 0);
  EXPECT_EQ(pool.Reserve(&a, 6).code(), absl::StatusCode::kResourceExhausted);
  pool.Release(&c);
  pool.Release(&a);
  EXPECT_TRUE(a.empty());
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(pool.blocks_free(), 4);
  EXPECT_EQ(pool.bytes_used(), 2 * pool.bytes_per_block());
  std::vector<int32_t> d;
  ASSERT_TRUE(pool.Reserve(&d, 8).ok());
  EXPECT_EQ(d, (std::vector<int32_t>{0, 1, 4, 5}));
  pool.Release(&b);
  pool.Release(&d);
  EXPECT_EQ(pool.blocks_free(), 6);
  pool.Release(&d);  // empty: no-op
  EXPECT_EQ(pool.blocks_free(), 6);
}

TEST(KvBlockPoolTest, BlockArithmetic) {
  EXPECT_EQ(KvBlockPool::BlocksFor(0, 16), 0);
  EXPECT_EQ(KvBlockPool::BlocksFor(-5, 16), 0);
  EXPECT_EQ(KvBlockPool::BlocksFor(1, 16), 1);
  EXPECT_EQ(KvBlockPool::BlocksFor(16, 16), 1);
  EXPECT_EQ(KvBlockPool::BlocksFor(17, 16), 2);
  EXPECT_EQ(KvBlockPool::BlocksFor(5, 0), 5);  // block size < 1 counts as 1
  EXPECT_EQ(KvBlockPool::BlocksNeeded(1, 17, 16), 1);
  EXPECT_EQ(KvBlockPool::BlocksNeeded(2, 17, 16), 0);
  EXPECT_EQ(KvBlockPool::BlocksNeeded(5, 17, 16), 0);  // never negative
  // Reserve takes exactly BlocksNeeded blocks.
  KvBlockPool pool(16, 16, 1, 4);
  std::vector<int32_t> table;
  ASSERT_TRUE(pool.Reserve(&table, 20).ok());
  const int64_t need = KvBlockPool::BlocksNeeded(static_cast<int64_t>(table.size()), 70, 16);
  const int before = pool.blocks_free();
  ASSERT_TRUE(pool.Reserve(&table, 70).ok());
  EXPECT_EQ(before - pool.blocks_free(), need);
}

TEST(KvBlockPoolTest, TruncateUndoesReserve) {
  KvBlockPool pool(8, 16, 1, 4);
  std::vector<int32_t> table;
  ASSERT_TRUE(pool.Reserve(&table, 16).ok());
  const std::vector<int32_t> first = table;
  ASSERT_TRUE(pool.Reserve(&table, 64).ok());
  EXPECT_EQ(pool.blocks_used(), 4);
  pool.Truncate(&table, first.size());
  EXPECT_EQ(table, first);
  EXPECT_EQ(pool.blocks_used(), 1);
  pool.Truncate(&table, 5);  // larger than the table: nothing to do
  EXPECT_EQ(table, first);
  // The returned blocks go out again, lowest ids first.
  std::vector<int32_t> other;
  ASSERT_TRUE(pool.Reserve(&other, 16).ok());
  EXPECT_EQ(other, std::vector<int32_t>{1});
}

// Every row of both dtypes is its own memory (what is written is read back, nothing else moves)
// and the rows span exactly bytes_total(); bf16 rows hold the nearest-even bf16 of what was
// written (the values here are exact in bf16: small integers), in half the bytes.
TEST(KvBlockPoolTest, RowsDoNotAliasInEitherDtype) {
  constexpr int kBlocks = 3, kBs = 4, kLayers = 2, kHidden = 5;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBf16}) {
    SCOPED_TRACE(std::string(KvDtypeName(dtype)));
    KvBlockPool pool(kBlocks, kBs, kLayers, kHidden, dtype);
    EXPECT_EQ(pool.bytes_per_block(), KvDtypeBytes(dtype) * 2 * kLayers * kBs * kHidden);
    auto value = [](int b, int l, int kv, int s, int h) {
      return static_cast<float>(((((b * kLayers + l) * 2 + kv) * kBs + s) * kHidden) + h);
    };
    const PagedKv view = pool.view();
    std::set<const char*> rows;
    float row[kHidden];
    for (int b = 0; b < kBlocks; ++b) {
      for (int l = 0; l < kLayers; ++l) {
        for (int s = 0; s < kBs; ++s) {
          for (int kv = 0; kv < 2; ++kv) {
            const char* at = static_cast<const char*>(view.base) +
                             PagedKv::RowOffset(b, l, kv, s, kBs, kLayers, kHidden) *
                                 static_cast<int64_t>(KvDtypeBytes(dtype));
            EXPECT_TRUE(rows.insert(at).second);
            for (int h = 0; h < kHidden; ++h) row[h] = value(b, l, kv, s, h);
            pool.WriteRow(b, l, kv, s, row);
          }
        }
      }
    }
    for (int b = 0; b < kBlocks; ++b) {
      for (int l = 0; l < kLayers; ++l) {
        for (int s = 0; s < kBs; ++s) {
          for (int kv = 0; kv < 2; ++kv) {
            pool.ReadRow(b, l, kv, s, row);
            for (int h = 0; h < kHidden; ++h) ASSERT_EQ(row[h], value(b, l, kv, s, h));
          }
        }
      }
    }
    // Rows lie inside the single allocation: the first and last row span bytes_total().
    const char* first = *rows.begin();
    const char* last = *rows.rbegin();
    EXPECT_EQ(static_cast<size_t>(last - first) + kHidden * KvDtypeBytes(dtype),
              pool.bytes_total());
  }
}

TEST(KvBlockPoolTest, Bf16RowsRoundToNearestEven) {
  KvBlockPool pool(1, 1, 1, 3, KvDtype::kBf16);
  // 1 + 2^-8 is halfway between two bf16 values: ties to even (1.0); 1 + 3 * 2^-8 rounds up.
  const float in[3] = {1.f + 1.f / 256, 1.f + 3.f / 256, -2.5f};
  pool.WriteRow(0, 0, 0, 0, in);
  float out[3];
  pool.ReadRow(0, 0, 0, 0, out);
  EXPECT_EQ(out[0], 1.f);
  EXPECT_EQ(out[1], 1.f + 4.f / 256);
  EXPECT_EQ(out[2], -2.5f);
}

}  // namespace
}  // namespace flatstate
