// SessionPersistence (server/sessions/session_persistence.h): the policy a SessionTable gets for
// its store, and what each policy does (and does not do) with the store, through the table.
#include "server/sessions/session_persistence.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/sessions/session_table.h"
#include "server/store/ids.h"
#include "tests/server/sessions/session_table_test_util.h"

namespace flatstate::server {
namespace {

std::vector<std::unique_ptr<LoadedModel>> OneModel() {
  std::vector<std::unique_ptr<LoadedModel>> v;
  v.push_back(std::make_unique<LoadedModel>(MakeModel(AttentionKind::kSoftmax)));
  return v;
}

class SessionPersistenceTest : public ::testing::Test {
 protected:
  LoadedModel* model() { return models_.models()[0].get(); }
  ModelRegistry models_{OneModel(), "m"};
  MemoryStore store_;
};

TEST_F(SessionPersistenceTest, StoreKindPicksThePolicy) {
  SessionTable local(&store_, &models_, Options(), nullptr);
  EXPECT_FALSE(local.shared());
  EXPECT_NE(dynamic_cast<LocalPersistence*>(SessionPersistence::For(&local).get()), nullptr);
  store_.shared_mode = true;
  SessionTable shared(&store_, &models_, Options(), nullptr);
  EXPECT_TRUE(shared.shared());
  EXPECT_NE(dynamic_cast<SharedPersistence*>(SessionPersistence::For(&shared).get()), nullptr);
}

TEST_F(SessionPersistenceTest, LocalNeverWritesATurnAndDoesNotLookUpUnknownIds) {
  SessionTable table(&store_, &models_, Options(), nullptr);
  Session* s = *table.Create(model(), SamplingParams{}, false);
  Generate(model()->engine.get(), &s->state, {1, 2}, 3);
  EXPECT_TRUE(table.Refresh(s).ok());
  EXPECT_TRUE(table.Persist(s).ok());
  EXPECT_TRUE(store_.stored.empty());
  EXPECT_TRUE(store_.evicted.empty());

  // An id the table does not hold does not exist, whatever a store might have.
  const std::string id = NewId();
  store_.stored[id] = StoredSession{};
  absl::StatusOr<Session*> missing = table.Find(id);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "session_id: session '" + id + "' not found");

  // Delete only frees memory.
  const std::string sid = s->id;
  ASSERT_TRUE(table.Delete(s).ok());
  EXPECT_EQ(table.InMemory(sid), nullptr);
  EXPECT_EQ(store_.stored.size(), 1u);
}

TEST_F(SessionPersistenceTest, LocalEvictsIdleSessionsToTheStoreAndRestoresThem) {
  SessionTable table(&store_, &models_, Options(), nullptr);
  Session* s = *table.Create(model(), SamplingParams{}, false);
  Generate(model()->engine.get(), &s->state, {1, 2, 3}, 2);
  const int64_t position = s->state.position;
  EXPECT_EQ(table.EvictIdle(s->last_used + absl::Seconds(59)), 0);  // not idle for the ttl yet
  EXPECT_EQ(table.EvictIdle(s->last_used + absl::Seconds(61)), 1);
  EXPECT_FALSE(s->resident);
  EXPECT_EQ(store_.evicted.count(s->id), 1u);
  EXPECT_TRUE(store_.stored.empty());  // eviction is not a shared write
  ASSERT_TRUE(table.EnsureResident(s).ok());
  EXPECT_TRUE(s->resident);
  EXPECT_EQ(s->state.position, position);
  EXPECT_TRUE(store_.evicted.empty());
}

TEST_F(SessionPersistenceTest, SharedWritesThroughLoadsUnknownIdsAndDeletesFromTheStore) {
  store_.shared_mode = true;
  SessionTable a(&store_, &models_, Options(), nullptr);
  SessionTable b(&store_, &models_, Options(), nullptr);
  Session* s = *a.Create(model(), SamplingParams{}, false);
  Generate(model()->engine.get(), &s->state, {1, 2}, 3);
  ASSERT_TRUE(a.Persist(s).ok());
  EXPECT_EQ(s->stored_version, 1u);
  ASSERT_EQ(store_.stored.count(s->id), 1u);
  EXPECT_EQ(store_.stored[s->id].version, 1u);

  // Another table over the store finds it there.
  absl::StatusOr<Session*> loaded = b.Find(s->id);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->state.position, s->state.position);

  // An unknown id is NotFound naming the store.
  absl::StatusOr<Session*> missing = b.Find(NewId());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(missing.status().message()).find("memory:"), std::string::npos);

  // Idle sessions leave memory without an eviction blob; the stored copy stays.
  EXPECT_EQ(b.EvictIdle((*loaded)->last_used + absl::Seconds(61)), 1);
  EXPECT_TRUE(store_.evicted.empty());
  EXPECT_EQ(store_.stored.count(s->id), 1u);

  const std::string id = s->id;
  ASSERT_TRUE(a.Delete(s).ok());
  EXPECT_EQ(store_.stored.count(id), 0u);
}

TEST_F(SessionPersistenceTest, SharedNeverWritesAThrowawaySession) {
  store_.shared_mode = true;
  SessionTable table(&store_, &models_, Options(), nullptr);
  Session* s = *table.Create(model(), SamplingParams{}, /*throwaway=*/true);
  Generate(model()->engine.get(), &s->state, {1}, 1);
  EXPECT_TRUE(table.Persist(s).ok());
  EXPECT_TRUE(table.Refresh(s).ok());
  EXPECT_TRUE(store_.stored.empty());
}

}  // namespace
}  // namespace flatstate::server
