// SessionTable: every session a server holds in memory (id -> Session: model, state, residency,
// decoder tail, last use), the --max_sessions cap, and its SessionStore, used through a
// SessionPersistence policy the store's kind chooses (session_persistence.h):
// - not shared (DirSessionStore): idle sessions are evicted to the store and restored on next use
//   (transparently; they stay in the table as "evicted").
// - shared (RedisSessionStore; docs/cluster.md): the store is the source of truth. Find loads a
//   session this replica does not hold; Refresh checks the stored version before a turn and
//   reloads when another replica advanced it; Persist writes a turn through (fenced, incremental
//   for softmax: only the KV chunks the turn touched). Idle sessions leave memory (their stored
//   copy stays); a session whose last write failed is written again first.
//
// Ownership: owns the Session objects and its persistence policy (their addresses are stable until
// Erase); the SessionStore and Metrics are borrowed and must outlive the table. A resident
// session's KV blocks belong to its model's pool and go back to it on Erase or eviction; the
// destructor does not release them (the engines are destroyed with the table's owner).
// Thread-safety: none; the engine loop thread is its only user.
// Failures are statuses naming the session: NotFound (unknown id), ResourceExhausted
// (max_sessions), the store's and the engine's errors when evicting or restoring. An idle
// session whose eviction fails stays in memory (tried again after another ttl); a session is
// never dropped silently.
#ifndef FLATSTATE_SERVER_SESSIONS_SESSION_TABLE_H_
#define FLATSTATE_SERVER_SESSIONS_SESSION_TABLE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/session/session_state.h"
#include "engine/tokenizer/tokenizer.h"
#include "server/core/loop_types.h"
#include "server/core/metrics.h"
#include "server/core/model_registry.h"
#include "server/sessions/session_persistence.h"
#include "server/store/session_store.h"

namespace flatstate::server {

struct Session {
  std::string id;
  LoadedModel* model = nullptr;
  SessionState state;  // meaningful while resident
  // The model tokenizer's incremental decoder: holds an incomplete character between calls; its
  // state is what a checkpoint stores as text_tail.
  TokenDecoder decoder;
  bool resident = true;     // false: evicted to the store
  bool throwaway = false;   // one Generate's session: not findable by id, erased after it
  bool generating = false;  // a Generate is using it: never evicted meanwhile
  absl::Time last_used;
  uint64_t evicted_context_tokens = 0;
  // Shared stores: the stored version this state was loaded from or last saved as (0: never
  // stored), the position it had then (the next save rewrites KV chunks from there on), whether a
  // newer state failed to reach the store, and the lease of the turn in progress.
  uint64_t stored_version = 0;
  int64_t stored_position = 0;
  bool unsaved = false;
  std::optional<SessionLease> lease;
};

struct SessionTableOptions {
  int64_t max_sessions = 1024;
  absl::Duration idle_ttl = absl::Minutes(10);  // <= 0: never evict
  bool log_evictions = false;                   // one stderr line per eviction
};

class SessionTable {
 public:
  // `store`, `models` and `metrics` (may be null) must outlive the table. `models` finds the model
  // of a session loaded from a shared store (by fingerprint).
  SessionTable(SessionStore* store, const ModelRegistry* models, const SessionTableOptions& options,
               Metrics* metrics);
  ~SessionTable();
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // ResourceExhausted when max_sessions sessions exist (resident, evicted or throwaway).
  absl::Status CheckCapacity() const;
  // A new empty session of `model` (CheckCapacity first).
  absl::StatusOr<Session*> Create(LoadedModel* model, const SamplingParams& sampling,
                                  bool throwaway);
  // A new session from a checkpoint `blob` of `model` (CheckCapacity first, then
  // Engine::Restore); its decoder continues the checkpoint's incomplete character.
  absl::StatusOr<Session*> Restore(LoadedModel* model, absl::string_view blob,
                                   bool throwaway = false);
  // A new session (a new id; `throwaway` as for Create) that continues exactly as resident
  // session `s` would: Engine::Fork (KV blocks shared, state copied) plus its decoder's
  // incomplete character. CheckCapacity first; the engine's errors otherwise; `s` unchanged.
  absl::StatusOr<Session*> Fork(Session* s, bool throwaway);

  // The session `id` (not a throwaway one), resident or not. NotFound naming session_id. Shared
  // store: a session not in memory is loaded from the store (NotFound only when the store has
  // none; FailedPrecondition naming the fingerprint when no loaded model wrote it; Unavailable
  // naming the store when it cannot be reached; DataLoss for a corrupt stored value).
  absl::StatusOr<Session*> Find(absl::string_view id);
  // The session `id` if this server holds it (resident or evicted), else null. Never reads the
  // store.
  Session* InMemory(absl::string_view id);
  // Find, then restore it from the store if it was evicted; marks it used now.
  absl::StatusOr<Session*> FindResident(absl::string_view id);
  // Restores `s` from the store if it was evicted; marks it used now. On failure `s` stays
  // evicted (its blob stays in the store).
  absl::Status EnsureResident(Session* s);
  // Frees `s` (KV blocks, or its evicted blob). `s` is invalid afterwards. A shared store keeps
  // its copy (see Delete).
  void Erase(Session* s);
  // Erase, and remove the session from a shared store too (its error, if any, is returned after
  // the in-memory copy is gone; NotFound from the store is not an error).
  absl::Status Delete(Session* s);

  // ---- shared stores only (no-ops returning OK otherwise) ----
  bool shared() const { return persistence_->shared(); }
  // One version read: reloads `s` when the store holds a newer version (freeing the stale copy
  // first, so a softmax session needs room for the new version's KV blocks only). When the store
  // no longer has the session (deleted elsewhere), or the newer version cannot be loaded, `s` is
  // erased and the error returned (NotFound; the load's status). When the store cannot be
  // reached for the version read, `s` is used as it is (OK; counted in store_up).
  absl::Status Refresh(Session* s);
  // Writes `s` through: Save(expected = s->stored_version) of the split checkpoint from
  // s->stored_position on. On failure `s` is marked unsaved, the failure counted and logged, and
  // the status returned (Aborted: another replica advanced the session; the next Refresh
  // reloads it).
  absl::Status Persist(Session* s);

  // The checkpoint blob of resident session `s` (its decoder's incomplete character included).
  absl::StatusOr<std::string> Checkpoint(Session* s);

  // Evicts every resident, non-throwaway, non-generating session unused for idle_ttl at `now`;
  // returns how many it evicted.
  int EvictIdle(absl::Time now);
  // EvictIdle(now), at most every min(1 s, max(50 ms, ttl / 4)); nothing if idle_ttl <= 0.
  void MaybeEvictIdle(absl::Time now);

  SessionInfo Info(const Session& s) const;
  struct Counts {
    uint64_t resident = 0;
    uint64_t evicted = 0;
    uint64_t state_bytes = 0;  // of resident sessions
  };
  Counts Count() const;
  size_t size() const { return sessions_.size(); }

 private:
  // The policies are the table's two halves: they add, erase, checkpoint and scan its sessions.
  friend class LocalPersistence;
  friend class SharedPersistence;
  friend class SessionPersistence;

  // NotFound "session_id: session '<id>' not found".
  static absl::Status NotFound(absl::string_view id);
  // `model`'s detokenizer holding `tail` (the decoder state a checkpoint carried), so the text of
  // a restored session continues exactly where the original left off.
  static TokenDecoder DecoderWithTail(const LoadedModel* model, const std::string& tail);
  Session* Add(LoadedModel* model, SessionState state, bool throwaway);  // a new id
  Session* Add(std::string id, LoadedModel* model, SessionState state, bool throwaway);

  SessionStore* const store_;
  const ModelRegistry* const models_;
  const SessionTableOptions options_;
  Metrics* const metrics_;
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
  std::unique_ptr<SessionPersistence> persistence_;
  absl::Time last_evict_scan_ = absl::InfinitePast();
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_SESSIONS_SESSION_TABLE_H_
