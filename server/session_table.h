// SessionTable: every session a server knows (id -> Session: model, state, residency, decoder
// tail, last use), the --max_sessions cap, idle eviction to a SessionStore and transparent
// restore on next use.
//
// Ownership: owns the Session objects (their addresses are stable until Erase); the SessionStore
// and Metrics are borrowed and must outlive the table. A resident session's KV blocks belong to
// its model's pool and go back to it on Erase or eviction; the destructor does not release them
// (the engines are destroyed with the table's owner).
// Thread-safety: none; the engine loop thread is its only user.
// Failures are statuses naming the session: NotFound (unknown id), ResourceExhausted
// (max_sessions), the store's and the engine's errors when evicting or restoring. An idle
// session whose eviction fails stays in memory (tried again after another ttl); a session is
// never dropped silently.
#ifndef FLATSTATE_SERVER_SESSION_TABLE_H_
#define FLATSTATE_SERVER_SESSION_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/session/session_state.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "server/loop_types.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/session_store.h"

namespace flatstate::server {

struct Session {
  std::string id;
  LoadedModel* model = nullptr;
  SessionState state;          // meaningful while resident
  IncrementalDecoder decoder;  // holds an incomplete character between calls
  bool resident = true;        // false: evicted to the store
  bool throwaway = false;      // one Generate's session: not findable by id, erased after it
  bool generating = false;     // a Generate is using it: never evicted meanwhile
  absl::Time last_used;
  uint64_t evicted_context_tokens = 0;
};

struct SessionTableOptions {
  int64_t max_sessions = 1024;
  absl::Duration idle_ttl = absl::Minutes(10);  // <= 0: never evict
  bool log_evictions = false;                   // one stderr line per eviction
};

class SessionTable {
 public:
  // `store` and `metrics` (may be null) must outlive the table.
  SessionTable(SessionStore* store, const SessionTableOptions& options, Metrics* metrics);
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;

  // ResourceExhausted when max_sessions sessions exist (resident, evicted or throwaway).
  absl::Status CheckCapacity() const;
  // A new empty session of `model` (CheckCapacity first).
  absl::StatusOr<Session*> Create(LoadedModel* model, const SamplingParams& sampling,
                                  bool throwaway);
  // A new session from a checkpoint `blob` of `model` (CheckCapacity first, then
  // Engine::Restore); its decoder continues the checkpoint's incomplete character.
  absl::StatusOr<Session*> Restore(LoadedModel* model, absl::string_view blob);

  // The session `id` (not a throwaway one), resident or not. NotFound naming session_id.
  absl::StatusOr<Session*> Find(absl::string_view id);
  // Find, then restore it from the store if it was evicted; marks it used now.
  absl::StatusOr<Session*> FindResident(absl::string_view id);
  // Restores `s` from the store if it was evicted; marks it used now. On failure `s` stays
  // evicted (its blob stays in the store).
  absl::Status EnsureResident(Session* s);
  // Frees `s` (KV blocks, or its evicted blob). `s` is invalid afterwards.
  void Erase(Session* s);

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
  Session* Add(LoadedModel* model, SessionState state, bool throwaway);

  SessionStore* const store_;
  const SessionTableOptions options_;
  Metrics* const metrics_;
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
  absl::Time last_evict_scan_ = absl::InfinitePast();
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_SESSION_TABLE_H_
