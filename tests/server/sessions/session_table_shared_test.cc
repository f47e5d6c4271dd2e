// SessionTable over a shared store, without gRPC: two tables over one store are two replicas
// (docs/cluster.md): exact continuation on any replica, reload of a stale copy, fenced writes,
// deletion elsewhere, the store down, unknown models, corrupt values.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/sessions/session_table.h"
#include "tests/server/sessions/session_table_test_util.h"

namespace flatstate::server {
namespace {

// ---- shared store: two tables over one store are two replicas ----

struct Replica {
  explicit Replica(MemoryStore* store, AttentionKind kind, Metrics* metrics = nullptr)
      : models(Models(kind), "m"), table(store, &models, Options(), metrics) {}
  static std::vector<std::unique_ptr<LoadedModel>> Models(AttentionKind kind) {
    std::vector<std::unique_ptr<LoadedModel>> v;
    v.push_back(std::make_unique<LoadedModel>(MakeModel(kind)));
    return v;
  }
  Engine* engine() { return models.models()[0]->engine.get(); }
  ModelRegistry models;
  SessionTable table;
};

TEST(SessionTableSharedTest, AnyReplicaContinuesExactlyAndAStaleOneReloads) {
  for (AttentionKind kind : {AttentionKind::kSoftmax, AttentionKind::kLinearElu}) {
    MemoryStore store;
    store.shared_mode = true;
    Replica a(&store, kind), b(&store, kind);
    const SamplingParams sp{0.8f, 0, 1.f, 11};
    SessionState ref = a.engine()->NewSession(sp);
    const auto t1 = Generate(a.engine(), &ref, {1, 2, 3}, 6);
    const auto t2 = Generate(a.engine(), &ref, {4}, 7);
    const auto t3 = Generate(a.engine(), &ref, {5}, 5);
    a.engine()->ReleaseSession(&ref);

    Session* sa = *a.table.Create(a.models.models()[0].get(), sp, false);
    ASSERT_TRUE(a.table.Persist(sa).ok());
    EXPECT_EQ(sa->stored_version, 1u);
    EXPECT_EQ(Generate(a.engine(), &sa->state, {1, 2, 3}, 6), t1);
    ASSERT_TRUE(a.table.Persist(sa).ok());
    EXPECT_EQ(sa->stored_version, 2u);

    // Replica B does not hold it: Find loads it, and it continues exactly.
    EXPECT_EQ(b.table.InMemory(sa->id), nullptr);
    absl::StatusOr<Session*> sb = b.table.Find(sa->id);
    ASSERT_TRUE(sb.ok()) << sb.status();
    EXPECT_EQ((*sb)->stored_version, 2u);
    EXPECT_EQ(Generate(b.engine(), &(*sb)->state, {4}, 7), t2) << AttentionKindName(kind);
    ASSERT_TRUE(b.table.Persist(*sb).ok());

    // Back on A: its copy is stale; Refresh reloads B's turn, and the next turn is exact.
    ASSERT_TRUE(a.table.Refresh(sa).ok());
    EXPECT_EQ(sa->stored_version, 3u);
    EXPECT_EQ(Generate(a.engine(), &sa->state, {5}, 5), t3) << AttentionKindName(kind);
  }
}

// A stale copy is dropped before the newer version is loaded, so reloading a softmax session
// needs room for its new KV blocks only, not for both copies (seen: a 16k-token session that had
// grown on another replica did not fit beside its 4k-token stale copy).
TEST(SessionTableSharedTest, ReloadNeedsRoomForTheNewVersionOnly) {
  MemoryStore store;
  store.shared_mode = true;
  Replica a(&store, AttentionKind::kSoftmax), b(&store, AttentionKind::kSoftmax);
  KvBlockPool* pool_a = a.engine()->kv_pool();
  Session* sa = *a.table.Create(a.models.models()[0].get(), SamplingParams{}, false);
  Generate(a.engine(), &sa->state, std::vector<int32_t>(16 * 20, 3), 1);  // 21 of 64 blocks
  ASSERT_TRUE(a.table.Persist(sa).ok());
  Session* sb = *b.table.Find(sa->id);
  Generate(b.engine(), &sb->state, std::vector<int32_t>(16 * 30, 4), 1);  // 51 blocks
  ASSERT_TRUE(b.table.Persist(sb).ok());
  ASSERT_GT(pool_a->blocks_used() + static_cast<int>(sb->state.kv_blocks.size()),
            pool_a->blocks_total())
      << "both copies must not fit, or this tests nothing";
  absl::Status st = a.table.Refresh(sa);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(sa->state.context_tokens(), sb->state.context_tokens());
  EXPECT_EQ(pool_a->blocks_used(), static_cast<int>(sa->state.kv_blocks.size()));
}

// A reload that fails drops the stale copy from memory (the store holds a newer version, which
// a later turn loads), rather than serving it.
TEST(SessionTableSharedTest, FailedReloadDropsTheStaleCopy) {
  MemoryStore store;
  store.shared_mode = true;
  Replica a(&store, AttentionKind::kLinearElu), b(&store, AttentionKind::kLinearElu);
  Session* sa = *a.table.Create(a.models.models()[0].get(), SamplingParams{}, false);
  ASSERT_TRUE(a.table.Persist(sa).ok());
  const std::string id = sa->id;
  Session* sb = *b.table.Find(id);
  Generate(b.engine(), &sb->state, {5, 6}, 2);
  ASSERT_TRUE(b.table.Persist(sb).ok());
  store.stored[id].head[0] ^= 1;  // the newer version is corrupt
  EXPECT_EQ(a.table.Refresh(sa).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(a.table.InMemory(id), nullptr);
}

TEST(SessionTableSharedTest, StaleWriteIsRefusedAndTheWinnerStays) {
  MemoryStore store;
  store.shared_mode = true;
  Replica a(&store, AttentionKind::kSoftmax), b(&store, AttentionKind::kSoftmax);
  Session* sa = *a.table.Create(a.models.models()[0].get(), SamplingParams{}, false);
  ASSERT_TRUE(a.table.Persist(sa).ok());
  Session* sb = *b.table.Find(sa->id);
  Generate(b.engine(), &sb->state, {7, 7}, 3);
  ASSERT_TRUE(b.table.Persist(sb).ok());
  const StoredSession winner = store.stored[sa->id];
  Generate(a.engine(), &sa->state, {9}, 4);
  EXPECT_EQ(a.table.Persist(sa).code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(sa->unsaved);
  EXPECT_EQ(store.stored[sa->id].version, winner.version);
  EXPECT_EQ(store.stored[sa->id].head, winner.head);
  ASSERT_TRUE(a.table.Refresh(sa).ok());  // reloads the winner's state
  EXPECT_FALSE(sa->unsaved);
  EXPECT_EQ(sa->state.context_tokens(), sb->state.context_tokens());
}

TEST(SessionTableSharedTest, DeletedElsewhereIsNotFoundAndLeavesMemory) {
  MemoryStore store;
  store.shared_mode = true;
  Replica a(&store, AttentionKind::kLinearElu), b(&store, AttentionKind::kLinearElu);
  Session* sa = *a.table.Create(a.models.models()[0].get(), SamplingParams{}, false);
  ASSERT_TRUE(a.table.Persist(sa).ok());
  const std::string id = sa->id;
  ASSERT_TRUE(b.table.Delete(*b.table.Find(id)).ok());
  absl::Status st = a.table.Refresh(sa);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_EQ(a.table.InMemory(id), nullptr);
  EXPECT_EQ(a.table.Find(id).status().code(), absl::StatusCode::kNotFound);
}

TEST(SessionTableSharedTest, StoreDownServesMemoryCountsFailedWritesAndRecovers) {
  MemoryStore store;
  store.shared_mode = true;
  Metrics metrics;
  Replica a(&store, AttentionKind::kLinearElu, &metrics), b(&store, AttentionKind::kLinearElu);
  Session* sa = *a.table.Create(a.models.models()[0].get(), SamplingParams{}, false);
  ASSERT_TRUE(a.table.Persist(sa).ok());
  store.down = true;
  EXPECT_TRUE(a.table.Refresh(sa).ok());  // in memory: goes on
  Generate(a.engine(), &sa->state, {1, 2}, 2);
  EXPECT_EQ(a.table.Persist(sa).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(sa->unsaved);
  EXPECT_EQ(metrics.store_write_failures_total.load(), 1u);
  EXPECT_EQ(metrics.store_up.load(), 0u);
  // Not in memory on B: Unavailable, not NotFound.
  EXPECT_EQ(b.table.Find(sa->id).status().code(), absl::StatusCode::kUnavailable);
  // An unsaved session is never dropped from memory while the store is down.
  EXPECT_EQ(a.table.EvictIdle(absl::Now() + absl::Hours(1)), 0);
  store.down = false;
  ASSERT_TRUE(a.table.Refresh(sa).ok());
  EXPECT_EQ(metrics.store_up.load(), 1u);
  const std::string id = sa->id;
  EXPECT_EQ(a.table.EvictIdle(absl::Now() + absl::Hours(2)), 1);  // persisted, then dropped
  EXPECT_EQ(a.table.InMemory(id), nullptr);
  absl::StatusOr<Session*> sb = b.table.Find(id);
  ASSERT_TRUE(sb.ok()) << sb.status();
  EXPECT_EQ((*sb)->state.context_tokens(), 4);
}

TEST(SessionTableSharedTest, UnknownModelFingerprintIsFailedPrecondition) {
  MemoryStore store;
  store.shared_mode = true;
  Replica a(&store, AttentionKind::kLinearElu), b(&store, AttentionKind::kSoftmax);
  Session* sa = *a.table.Create(a.models.models()[0].get(), SamplingParams{}, false);
  ASSERT_TRUE(a.table.Persist(sa).ok());
  absl::Status st = b.table.Find(sa->id).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("fingerprint"), std::string::npos) << st;
}

TEST(SessionTableSharedTest, CorruptStoredHeadIsDataLoss) {
  MemoryStore store;
  store.shared_mode = true;
  Replica a(&store, AttentionKind::kSoftmax), b(&store, AttentionKind::kSoftmax);
  Session* sa = *a.table.Create(a.models.models()[0].get(), SamplingParams{}, false);
  Generate(a.engine(), &sa->state, {1, 2, 3}, 2);
  ASSERT_TRUE(a.table.Persist(sa).ok());
  // (A flipped payload bit is caught by the store's own checksum of each value: the Redis store
  // frames every value with a CRC; redis_session_store_test.)
  StoredSession& stored = store.stored[sa->id];
  stored.head[0] ^= 1;
  EXPECT_EQ(b.table.Find(sa->id).status().code(), absl::StatusCode::kDataLoss);
  stored.head[0] ^= 1;
  stored.chunks[0].pop_back();  // a truncated chunk: sizes no longer match the header
  EXPECT_EQ(b.table.Find(sa->id).status().code(), absl::StatusCode::kDataLoss);
  stored.chunks[0].push_back('x');
  EXPECT_TRUE(b.table.Find(sa->id).ok());
}

}  // namespace
}  // namespace flatstate::server
