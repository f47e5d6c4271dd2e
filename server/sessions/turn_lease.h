// TurnLease: the lease of one session for one turn (Generate, Checkpoint, Delete) on a shared
// SessionStore, released when the turn ends: by Release(), or by the destructor of a TurnLease
// that still holds one. Empty (nothing to release) for non-shared stores and when the store could
// not be reached.
//
// Owns the SessionLease it holds; borrows the store, which must outlive it. Not thread-safe (the
// engine loop's). Release is best effort and never fails (an unreleased lease expires on its
// own, SessionStore::ReleaseLease).
#ifndef FLATSTATE_SERVER_SESSIONS_TURN_LEASE_H_
#define FLATSTATE_SERVER_SESSIONS_TURN_LEASE_H_

#include <optional>
#include <utility>

#include "server/store/session_store.h"

namespace flatstate::server {

class TurnLease {
 public:
  explicit TurnLease(SessionStore* store) : store_(store) {}
  TurnLease(SessionStore* store, std::optional<SessionLease> held) : store_(store) {
    if (held.has_value()) Hold(std::move(*held));
  }
  ~TurnLease() { Release(); }
  TurnLease(const TurnLease&) = delete;
  TurnLease& operator=(const TurnLease&) = delete;

  void Hold(SessionLease lease) {
    Release();
    lease_ = std::move(lease);
    held_ = true;
  }
  void Release() {
    if (held_) store_->ReleaseLease(lease_);
    held_ = false;
  }
  // Hands the lease over (to a Session, for a stream that outlives this scope).
  std::optional<SessionLease> Take() {
    if (!held_) return std::nullopt;
    held_ = false;
    return std::move(lease_);
  }

 private:
  SessionStore* store_;
  // A plain member and a flag rather than std::optional: GCC 12 reports a false
  // -Wmaybe-uninitialized for an optional of strings here.
  SessionLease lease_;
  bool held_ = false;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_SESSIONS_TURN_LEASE_H_
