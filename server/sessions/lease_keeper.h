// LeaseKeeper: renews the leases of the turns in progress from a thread of its own, every third
// of the lease time, so a turn keeps its lease however long one engine step runs (a long prefill
// step blocks the engine loop, never this thread). docs/cluster.md, "What a turn does".
//
// The engine loop hands over each lease a stream takes (Track) and takes it back when the stream
// releases it (Untrack), and collects those the store refused to renew (TakeLost: the lease is
// no longer ours, e.g. it expired while this process was stopped). A store that cannot be reached
// is not a loss: the renewal is tried again next round, and the stream goes on. A lease released
// while a round was renewing it may fail that renewal and be reported too; the loop ignores
// tokens no stream holds.
//
// Owns its thread; borrows `store`, which must outlive it (SessionStore is safe to call from any
// thread). Thread-safe. Never fails: renewal errors become TakeLost entries.
#ifndef FLATSTATE_SERVER_SESSIONS_LEASE_KEEPER_H_
#define FLATSTATE_SERVER_SESSIONS_LEASE_KEEPER_H_

#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/session_store.h"

namespace flatstate::server {

struct LostLease {
  SessionLease lease;
  absl::Status status;  // the store's answer to the renewal
};

class LeaseKeeper {
 public:
  // Starts the thread. `lease` is the store's lease time (> 0).
  LeaseKeeper(SessionStore* store, absl::Duration lease);
  ~LeaseKeeper();  // stops and joins the thread
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Renews `lease` from now on, until Untrack(lease.token) or until the store refuses it.
  void Track(const SessionLease& lease);
  void Untrack(const std::string& token);
  // The leases whose renewal the store refused since the last call.
  std::vector<LostLease> TakeLost();
  // Renewals attempted so far (tests).
  uint64_t renewals() const;

 private:
  void Run();

  SessionStore* const store_;
  const absl::Duration every_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  absl::flat_hash_map<std::string, SessionLease> held_ ABSL_GUARDED_BY(mu_);  // by token
  std::vector<LostLease> lost_ ABSL_GUARDED_BY(mu_);
  uint64_t renewals_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_SESSIONS_LEASE_KEEPER_H_
