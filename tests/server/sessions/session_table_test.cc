// SessionTable unit tests, without gRPC: create, find, capacity, idle eviction and exact restore
// through a SessionStore, a store failure keeping the session in memory, delete of an evicted
// session.
#include "server/sessions/session_table.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/server/sessions/session_table_test_util.h"

namespace flatstate::server {
namespace {

TEST(SessionTableTest, CreateFindEraseAndThrowawayIsNotFindable) {
  LoadedModel m = MakeModel(AttentionKind::kLinearElu);
  MemoryStore store;
  SessionTable table(&store, nullptr, Options(), nullptr);
  auto a = table.Create(&m, SamplingParams{}, false);
  ASSERT_TRUE(a.ok()) << a.status();
  auto found = table.Find((*a)->id);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, *a);
  auto t = table.Create(&m, SamplingParams{}, /*throwaway=*/true);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(table.Find((*t)->id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.size(), 2u);
  const SessionInfo info = table.Info(**a);
  EXPECT_EQ(info.session_id, (*a)->id);
  EXPECT_EQ(info.model, "m");
  EXPECT_FALSE(info.evicted);
  const std::string id = (*a)->id;
  table.Erase(*a);
  EXPECT_EQ(table.Find(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.size(), 1u);
}

TEST(SessionTableTest, CapacityIsEnforced) {
  LoadedModel m = MakeModel(AttentionKind::kLinearElu);
  MemoryStore store;
  SessionTable table(&store, nullptr, Options(2), nullptr);
  ASSERT_TRUE(table.Create(&m, SamplingParams{}, false).ok());
  ASSERT_TRUE(table.Create(&m, SamplingParams{}, true).ok());
  auto third = table.Create(&m, SamplingParams{}, false);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("max_sessions"), std::string::npos);
  EXPECT_EQ(table.CheckCapacity().code(), absl::StatusCode::kResourceExhausted);
}

// Eviction writes the session to the store and frees its memory (KV blocks included); the next
// use restores it and it continues exactly as if it had never left.
TEST(SessionTableTest, EvictAndRestoreContinuesExactly) {
  for (AttentionKind kind : {AttentionKind::kSoftmax, AttentionKind::kLinearElu}) {
    LoadedModel m = MakeModel(kind);
    Engine* e = m.engine.get();
    const SamplingParams sp{0.8f, 0, 1.f, 7};
    SessionState ref = e->NewSession(sp);
    const auto expect_first = Generate(e, &ref, {1, 2, 3, 4, 5}, 6);
    const auto expect_more = Generate(e, &ref, {}, 10);
    e->ReleaseSession(&ref);

    MemoryStore store;
    Metrics metrics;
    SessionTable table(&store, nullptr, Options(), &metrics);
    Session* s = *table.Create(&m, sp, false);
    EXPECT_EQ(Generate(e, &s->state, {1, 2, 3, 4, 5}, 6), expect_first);
    const uint64_t context = static_cast<uint64_t>(s->state.context_tokens());
    // Not idle yet, or generating: nothing happens.
    EXPECT_EQ(table.EvictIdle(absl::Now()), 0);
    s->generating = true;
    EXPECT_EQ(table.EvictIdle(absl::Now() + absl::Hours(1)), 0);
    s->generating = false;
    EXPECT_EQ(table.EvictIdle(absl::Now() + absl::Hours(1)), 1);
    EXPECT_FALSE(s->resident);
    EXPECT_EQ(store.evicted.count(s->id), 1u);
    if (e->kv_pool() != nullptr) {
      EXPECT_EQ(e->kv_pool()->blocks_used(), 0);
    }
    EXPECT_TRUE(table.Info(*s).evicted);
    EXPECT_EQ(table.Info(*s).context_tokens, context);
    EXPECT_EQ(table.Count().evicted, 1u);

    auto back = table.FindResident(s->id);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE((*back)->resident);
    EXPECT_TRUE(store.evicted.empty());
    EXPECT_EQ(Generate(e, &(*back)->state, {}, 10), expect_more) << AttentionKindName(kind);
    EXPECT_EQ(metrics.sessions_evicted_total.load(), 1u);
    EXPECT_EQ(metrics.sessions_restored_total.load(), 1u);
    table.Erase(*back);
  }
}

TEST(SessionTableTest, StoreFailureKeepsTheSessionInMemory) {
  LoadedModel m = MakeModel(AttentionKind::kLinearElu);
  MemoryStore store;
  store.fail_puts = true;
  SessionTable table(&store, nullptr, Options(), nullptr);
  Session* s = *table.Create(&m, SamplingParams{}, false);
  ASSERT_TRUE(m.engine->Append(&s->state, std::vector<int32_t>{1, 2, 3}).ok());
  EXPECT_EQ(table.EvictIdle(absl::Now() + absl::Hours(1)), 0);
  EXPECT_TRUE(s->resident);
  EXPECT_EQ(s->state.pending.size(), 3u);
  auto found = table.FindResident(s->id);
  ASSERT_TRUE(found.ok());
  // It is tried again later, and goes once the store works.
  store.fail_puts = false;
  EXPECT_EQ(table.EvictIdle(absl::Now() + absl::Hours(2)), 1);
}

TEST(SessionTableTest, DeleteOfAnEvictedSessionRemovesItsBlob) {
  LoadedModel m = MakeModel(AttentionKind::kLinearElu);
  MemoryStore store;
  SessionTable table(&store, nullptr, Options(), nullptr);
  Session* s = *table.Create(&m, SamplingParams{}, false);
  const std::string id = s->id;
  ASSERT_EQ(table.EvictIdle(absl::Now() + absl::Hours(1)), 1);
  ASSERT_EQ(store.evicted.count(id), 1u);
  table.Erase(s);
  EXPECT_TRUE(store.evicted.empty());
  EXPECT_EQ(table.Find(id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(table.size(), 0u);
}

TEST(SessionTableTest, LostBlobIsAnErrorAndTheSessionStaysEvicted) {
  LoadedModel m = MakeModel(AttentionKind::kLinearElu);
  MemoryStore store;
  SessionTable table(&store, nullptr, Options(), nullptr);
  Session* s = *table.Create(&m, SamplingParams{}, false);
  ASSERT_EQ(table.EvictIdle(absl::Now() + absl::Hours(1)), 1);
  store.evicted.clear();
  EXPECT_EQ(table.FindResident(s->id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(s->resident);
}

TEST(SessionTableTest, RestoreFromCheckpointBlob) {
  LoadedModel m = MakeModel(AttentionKind::kSoftmax);
  MemoryStore store;
  SessionTable table(&store, nullptr, Options(), nullptr);
  Session* a = *table.Create(&m, SamplingParams{0.8f, 0, 1.f, 3}, false);
  Generate(m.engine.get(), &a->state, {9, 8, 7}, 4);
  auto blob = table.Checkpoint(a);
  ASSERT_TRUE(blob.ok()) << blob.status();
  auto b = table.Restore(&m, *blob);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*b)->id, a->id);
  EXPECT_EQ((*b)->state.context_tokens(), a->state.context_tokens());
  EXPECT_EQ(Generate(m.engine.get(), &(*b)->state, {}, 5),
            Generate(m.engine.get(), &a->state, {}, 5));
  std::string bad = *blob;
  bad[bad.size() / 2] ^= 1;
  EXPECT_EQ(table.Restore(&m, bad).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(table.size(), 2u);
}

}  // namespace
}  // namespace flatstate::server
