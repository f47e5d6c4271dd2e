// SessionTable unit tests, without gRPC: create, find, capacity, idle eviction and exact restore
// through a SessionStore, a store failure keeping the session in memory, delete of an evicted
// session.
#include "server/session_table.h"

#include <map>
#include <memory>
#include <string>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/util/model_writer.h"

namespace flatstate::server {
namespace {

// An in-memory SessionStore. Not shared: evicted blobs (Put fails while `fail_puts` is set).
// Shared (`shared_mode`): versions with the fencing check and chunked images, as the Redis store
// keeps them (the real one is tested in redis_session_store_test and tests/system/cluster_*).
class MemoryStore final : public SessionStore {
 public:
  bool shared() const override { return shared_mode; }
  std::string address() const override { return "memory:"; }
  absl::StatusOr<SessionLease> AcquireLease(absl::string_view id) override {
    return SessionLease{std::string(id), "t"};
  }
  absl::Status RenewLease(const SessionLease&) override { return absl::OkStatus(); }
  void ReleaseLease(const SessionLease&) override {}
  absl::StatusOr<uint64_t> Version(absl::string_view id) override {
    if (down) return absl::UnavailableError("memory store is down");
    auto it = stored.find(std::string(id));
    if (it == stored.end()) return absl::NotFoundError("no such session");
    return it->second.version;
  }
  absl::StatusOr<StoredSession> Load(absl::string_view id) override {
    if (down) return absl::UnavailableError("memory store is down");
    auto it = stored.find(std::string(id));
    if (it == stored.end()) return absl::NotFoundError("no such session");
    return it->second;
  }
  absl::StatusOr<uint64_t> Save(absl::string_view id, uint64_t expected,
                                const SessionImage& image) override {
    if (down) return absl::UnavailableError("memory store is down");
    StoredSession& s = stored[std::string(id)];
    if (s.version != expected) return absl::AbortedError("stale version");
    if (image.first_new_chunk > static_cast<int64_t>(s.chunks.size())) {
      return absl::InternalError("chunks missing");
    }
    s.chunks.resize(image.first_new_chunk);
    for (const std::string& c : image.new_chunks) s.chunks.push_back(c);
    s.head = image.head;
    s.chunk_tokens = image.chunk_tokens;
    last_new_chunks = image.new_chunks.size();
    return ++s.version;
  }
  absl::Status Delete(absl::string_view id) override {
    return stored.erase(std::string(id)) ? absl::OkStatus() : absl::NotFoundError("none");
  }
  absl::Status PutEvicted(absl::string_view id, absl::string_view blob) override {
    if (fail_puts) return absl::ResourceExhaustedError("store is full");
    evicted[std::string(id)] = std::string(blob);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> GetEvicted(absl::string_view id) const override {
    auto it = evicted.find(std::string(id));
    if (it == evicted.end()) return absl::NotFoundError("no such blob");
    return it->second;
  }
  void RemoveEvicted(absl::string_view id) override { evicted.erase(std::string(id)); }
  absl::Status PutCheckpoint(absl::string_view, absl::string_view) override {
    return absl::UnimplementedError("not used");
  }
  absl::StatusOr<std::string> GetCheckpoint(absl::string_view) const override {
    return absl::UnimplementedError("not used");
  }
  std::map<std::string, std::string> evicted;
  bool fail_puts = false;
  bool shared_mode = false;
  bool down = false;
  std::map<std::string, StoredSession> stored;
  size_t last_new_chunks = 0;
};

LoadedModel MakeModel(AttentionKind kind) {
  const std::string dir =
      testing::TempDir() + "/session_table_" + std::string(AttentionKindName(kind));
  EXPECT_TRUE(testing::WriteRandomModel(dir, testing::SmallConfig(kind), 5).ok());
  auto model = Model::Load(dir);
  EXPECT_TRUE(model.ok()) << model.status();
  EngineOptions o;
  o.threads = 1;
  o.kv_blocks = 64;
  auto engine = Engine::Create(std::move(*model), o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return LoadedModel{"m", std::move(*engine)};
}

// Appends `prompt` and generates `n` tokens.
std::vector<int32_t> Generate(Engine* e, SessionState* s, std::vector<int32_t> prompt, int n) {
  EXPECT_TRUE(e->Append(s, prompt).ok());
  std::vector<int32_t> out;
  std::vector<StepResult> res;
  while (static_cast<int>(out.size()) < n) {
    StepRequest r{s, 1 << 30, true};
    if (!e->Step(std::span<const StepRequest>(&r, 1), &res).ok()) break;
    if (res[0].sampled) out.push_back(res[0].token);
  }
  return out;
}

SessionTableOptions Options(int max_sessions = 8) {
  return SessionTableOptions{max_sessions, absl::Seconds(60), /*log_evictions=*/false};
}

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
