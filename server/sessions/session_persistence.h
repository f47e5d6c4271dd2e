// SessionPersistence: what a SessionTable does with its SessionStore, decided once by the store's
// kind (SessionStore::shared()) instead of at every call:
// - LocalPersistence (not shared: DirSessionStore): idle sessions are evicted to the store as
//   checkpoints and restored on next use; nothing else touches the store. Refresh and Persist
//   are no-ops, a session not in memory does not exist, Delete only frees memory.
// - SharedPersistence (shared: RedisSessionStore; docs/cluster.md): the store is the source of
//   truth. A session not in memory is loaded from it; Refresh checks the stored version before a
//   turn and reloads a newer one; Persist writes a turn through (fenced, incremental for softmax);
//   Delete removes the stored copy too; idle sessions leave memory (their stored copy stays; an
//   unsaved one is written first).
//
// Ownership: a policy belongs to one SessionTable (its `table`, which must outlive it) and
// borrows that table's store, models and metrics. Thread-safety: none; the engine loop thread is
// its only user, through the table. Failures: the statuses SessionTable documents for Find,
// Refresh, Persist, Delete; an idle session whose eviction fails stays in memory.
#ifndef FLATSTATE_SERVER_SESSIONS_SESSION_PERSISTENCE_H_
#define FLATSTATE_SERVER_SESSIONS_SESSION_PERSISTENCE_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/session/session_state.h"

namespace flatstate::server {

class SessionTable;
struct LoadedModel;
struct Session;

class SessionPersistence {
 public:
  // LocalPersistence or SharedPersistence, by `table`'s store.
  static std::unique_ptr<SessionPersistence> For(SessionTable* table);

  virtual ~SessionPersistence() = default;

  // True for the shared policy (the store's kind).
  virtual bool shared() const = 0;
  // Session `id` (a valid id) that the table does not hold: loaded into the table, or NotFound
  // naming session_id (SessionTable::Find's errors).
  virtual absl::StatusOr<Session*> FindMissing(absl::string_view id) = 0;
  // Before a turn on `s` (SessionTable::Refresh).
  virtual absl::Status Refresh(Session* s) = 0;
  // After a turn on `s` (SessionTable::Persist).
  virtual absl::Status Persist(Session* s) = 0;
  // Removes `s` from memory and, shared, from the store (SessionTable::Delete).
  virtual absl::Status Delete(Session* s) = 0;
  // Idle resident sessions (unused for the table's idle_ttl at `now`) leave memory; returns how
  // many did.
  virtual int EvictIdle(absl::Time now) = 0;
};

class LocalPersistence final : public SessionPersistence {
 public:
  explicit LocalPersistence(SessionTable* table) : table_(table) {}
  bool shared() const override { return false; }
  absl::StatusOr<Session*> FindMissing(absl::string_view id) override;
  absl::Status Refresh(Session*) override { return absl::OkStatus(); }
  absl::Status Persist(Session*) override { return absl::OkStatus(); }
  absl::Status Delete(Session* s) override;
  // Checkpoints each idle session to the store (PutEvicted) and frees its state.
  int EvictIdle(absl::Time now) override;

 private:
  SessionTable* const table_;
};

class SharedPersistence final : public SessionPersistence {
 public:
  explicit SharedPersistence(SessionTable* table) : table_(table) {}
  bool shared() const override { return true; }
  absl::StatusOr<Session*> FindMissing(absl::string_view id) override;
  absl::Status Refresh(Session* s) override;
  absl::Status Persist(Session* s) override;
  absl::Status Delete(Session* s) override;
  // Drops idle sessions from memory, persisting unsaved ones first.
  int EvictIdle(absl::Time now) override;

 private:
  // Reads session `id` and rebuilds its state (FindMissing's errors).
  absl::StatusOr<std::pair<LoadedModel*, SessionState>> LoadStored(absl::string_view id,
                                                                   uint64_t* version);
  void NoteStore(const absl::Status& s);

  SessionTable* const table_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_SESSIONS_SESSION_PERSISTENCE_H_
