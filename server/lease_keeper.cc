#include "server/lease_keeper.h"

#include <algorithm>
#include <utility>

namespace flatstate::server {

LeaseKeeper::LeaseKeeper(SessionStore* store, absl::Duration lease)
    : store_(store), every_(lease / 3), thread_([this] { Run(); }) {}

LeaseKeeper::~LeaseKeeper() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.Signal();
  }
  thread_.join();
}

void LeaseKeeper::Track(std::vector<SessionLease> held) {
  absl::MutexLock lock(&mu_);
  held_ = std::move(held);
}

std::vector<LostLease> LeaseKeeper::TakeLost() {
  absl::MutexLock lock(&mu_);
  return std::exchange(lost_, {});
}

uint64_t LeaseKeeper::renewals() const {
  absl::MutexLock lock(&mu_);
  return renewals_;
}

void LeaseKeeper::Run() {
  absl::MutexLock lock(&mu_);
  while (true) {
    const absl::Time until = absl::Now() + every_;
    while (!stop_ && absl::Now() < until) cv_.WaitWithDeadline(&mu_, until);
    if (stop_) return;
    const std::vector<SessionLease> round = held_;
    mu_.Unlock();  // the store calls run without the lock: Track and TakeLost never wait on them
    std::vector<LostLease> lost;
    for (const SessionLease& l : round) {
      absl::Status s = store_->RenewLease(l);
      if (!s.ok() && s.code() != absl::StatusCode::kUnavailable) lost.push_back({l, std::move(s)});
    }
    mu_.Lock();
    renewals_ += round.size();
    for (LostLease& l : lost) {
      // Renewed no more: a lost lease does not come back.
      held_.erase(std::remove_if(held_.begin(), held_.end(),
                                 [&](const SessionLease& h) { return h.token == l.lease.token; }),
                  held_.end());
      lost_.push_back(std::move(l));
    }
  }
}

}  // namespace flatstate::server
