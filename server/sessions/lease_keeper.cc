#include "server/sessions/lease_keeper.h"

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

void LeaseKeeper::Track(const SessionLease& lease) {
  absl::MutexLock lock(&mu_);
  held_[lease.token] = lease;
}

void LeaseKeeper::Untrack(const std::string& token) {
  absl::MutexLock lock(&mu_);
  held_.erase(token);
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
    std::vector<SessionLease> round;
    round.reserve(held_.size());
    for (const auto& [token, lease] : held_) round.push_back(lease);
    mu_.Unlock();  // the store calls run without the lock: Track and TakeLost never wait on them
    std::vector<LostLease> lost;
    for (const SessionLease& l : round) {
      absl::Status s = store_->RenewLease(l);
      if (!s.ok() && s.code() != absl::StatusCode::kUnavailable) lost.push_back({l, std::move(s)});
    }
    mu_.Lock();
    renewals_ += round.size();
    for (LostLease& l : lost) {
      held_.erase(l.lease.token);  // renewed no more: a lost lease does not come back
      lost_.push_back(std::move(l));
    }
  }
}

}  // namespace flatstate::server
