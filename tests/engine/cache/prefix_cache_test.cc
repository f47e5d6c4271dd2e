// PrefixCache and PrefixKeys: the key chain, least-recently-used order, the byte budget (linear
// states and softmax KV blocks, shared blocks counted once) and the block references it holds.
#include "engine/cache/prefix_cache.h"

#include <vector>

#include "engine/cache/prefix_key.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

std::vector<int32_t> Seq(int n, int32_t start = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = (start + i) % 256;
  return t;
}

TEST(PrefixKeys, ChainNamesEveryGridPrefixAndOnlyIt) {
  const auto a = Seq(50);
  auto b = a;
  b[20] = 7;  // differs inside the second grid step
  const auto ka = PrefixKeys(a, 16, 50), kb = PrefixKeys(b, 16, 50);
  ASSERT_EQ(ka.size(), 3u);  // 16, 32, 48
  EXPECT_EQ(ka[0], kb[0]);
  EXPECT_NE(ka[1], kb[1]);
  EXPECT_NE(ka[2], kb[2]);  // the chain carries the difference on
  // A prefix's key does not depend on what follows it, nor on `upto`.
  const auto kshort = PrefixKeys(std::span<const int32_t>(a).first(33), 16, 40);
  ASSERT_EQ(kshort.size(), 2u);
  EXPECT_EQ(kshort[1], ka[1]);
  EXPECT_TRUE(PrefixKeys(a, 16, 15).empty());
  EXPECT_TRUE(PrefixKeys(a, 0, 50).empty());
  // Token ids are hashed as 4-byte integers: 1 then 256 is not 256 then 1.
  EXPECT_NE(PrefixKeys(std::vector<int32_t>{1, 256}, 2, 2)[0],
            PrefixKeys(std::vector<int32_t>{256, 1}, 2, 2)[0]);
}

PrefixKey Key(uint8_t b) {
  PrefixKey k{};
  k[0] = b;
  k[31] = b;
  return k;
}

TEST(PrefixCache, LinearStatesAreEvictedLeastRecentlyUsedFirstWithinTheBudget) {
  const std::vector<float> state(100, 1.5f);  // 400 bytes
  PrefixCache c(1000, nullptr);
  c.InsertState(Key(1), 16, state);
  c.InsertState(Key(2), 32, state);
  EXPECT_EQ(c.bytes(), 800u);
  ASSERT_NE(c.Find(Key(1)), nullptr);  // 1 is now the most recently used
  c.InsertState(Key(3), 48, state);    // 1200 > 1000: the oldest (2) goes
  EXPECT_EQ(c.bytes(), 800u);
  EXPECT_EQ(c.Find(Key(2)), nullptr);
  const PrefixCache::Entry* e = c.Find(Key(1));
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->tokens, 16);
  EXPECT_EQ(e->state, state);
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.stats().insertions, 3u);
  // The same key again only marks it used.
  c.InsertState(Key(3), 48, state);
  EXPECT_EQ(c.entries(), 2u);
  // An entry larger than the whole budget is not kept.
  c.InsertState(Key(4), 64, std::vector<float>(300));
  EXPECT_EQ(c.Find(Key(4)), nullptr);
  EXPECT_LE(c.bytes(), 1000u);
}

TEST(PrefixCache, KvBlocksAreCountedOnceAndReturnedWithTheirLastReference) {
  KvBlockPool pool(8, 4, 1, 2);  // 32 bytes per block
  std::vector<int32_t> session;
  ASSERT_TRUE(pool.Reserve(&session, 16).ok());  // 4 blocks
  {
    PrefixCache c(4 * pool.bytes_per_block(), &pool);
    c.InsertBlocks(Key(1), 8, std::span<const int32_t>(session).first(2));
    c.InsertBlocks(Key(2), 16, session);  // shares the first two blocks with entry 1
    EXPECT_EQ(c.bytes(), 4 * pool.bytes_per_block());
    EXPECT_EQ(pool.blocks_cached(), 4);
    EXPECT_EQ(pool.blocks_cache_only(), 0);  // the session still uses them
    pool.Release(&session);
    EXPECT_EQ(pool.blocks_free(), 4);  // the cache keeps them
    EXPECT_EQ(pool.blocks_cache_only(), 4);
    // A session restored from entry 2 shares its blocks.
    std::vector<int32_t> restored;
    pool.Share(c.Find(Key(2))->blocks, &restored);
    EXPECT_EQ(pool.blocks_cache_only(), 0);
    EXPECT_TRUE(c.EvictOldest());  // entry 1 (2 was found last)
    EXPECT_TRUE(c.EvictOldest());
    EXPECT_EQ(c.bytes(), 0u);
    EXPECT_EQ(pool.blocks_free(), 4);  // still the restored session's
    pool.Release(&restored);
    EXPECT_EQ(pool.blocks_free(), 8);
    ASSERT_TRUE(pool.Reserve(&session, 8).ok());
    c.InsertBlocks(Key(3), 8, session);
  }
  // The destructor drops the cache's references.
  pool.Release(&session);
  EXPECT_EQ(pool.blocks_free(), 8);
  EXPECT_EQ(pool.blocks_cached(), 0);
}

TEST(PrefixCache, BudgetCountsBlocksAndEvictsUntilItFits) {
  KvBlockPool pool(16, 4, 1, 2);
  PrefixCache c(3 * pool.bytes_per_block(), &pool);
  for (uint8_t i = 0; i < 4; ++i) {
    std::vector<int32_t> t;
    ASSERT_TRUE(pool.Reserve(&t, 8).ok());  // 2 blocks each
    c.InsertBlocks(Key(i), 8, t);
    pool.Release(&t);
    EXPECT_LE(c.bytes(), 3 * pool.bytes_per_block());
  }
  EXPECT_EQ(c.entries(), 1u);  // two entries would be 4 blocks
  EXPECT_EQ(pool.blocks_free(), 14);
}

TEST(PrefixCache, CountsLookups) {
  PrefixCache c(100, nullptr);
  c.CountLookup(true, 64);
  c.CountLookup(false, 0);
  c.CountLookup(true, 128);
  const PrefixCacheStats s = c.stats();
  EXPECT_EQ(s.lookups, 3u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.tokens_saved, 192u);
  EXPECT_EQ(s.budget, 100u);
}

}  // namespace
}  // namespace flatstate
