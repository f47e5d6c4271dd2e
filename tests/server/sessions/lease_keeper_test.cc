// Tests of server/lease_keeper against a real redis-server (tests/util/redis_process.h): a tracked
// lease outlives many lease times, one no longer tracked expires, and one taken away is reported
// lost with the store's answer. Skipped with the reason when redis-server is not installed.
#include "server/sessions/lease_keeper.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/store/redis/redis_client.h"
#include "server/store/redis/redis_session_store.h"
#include "tests/util/redis_process.h"

namespace flatstate::testing {
namespace {

using server::LeaseKeeper;
using server::LostLease;
using server::RedisSessionStore;
using server::RedisSessionStoreOptions;
using server::SessionLease;

constexpr char kSession[] = "0123456789abcdef0123456789abcdef";

class LeaseKeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<RedisProcess>();
    if (!redis_->available()) GTEST_SKIP() << redis_->skip_reason();
  }
  std::unique_ptr<RedisSessionStore> NewStore(const std::string& replica) {
    RedisSessionStoreOptions o;
    o.address.port = redis_->port();
    o.replica_id = replica;
    o.session_ttl = absl::Seconds(60);
    o.lease = kLease;
    return std::make_unique<RedisSessionStore>(o);
  }
  static void Sleep(absl::Duration d) {
    std::this_thread::sleep_for(std::chrono::microseconds(absl::ToInt64Microseconds(d)));
  }

  static constexpr absl::Duration kLease = absl::Milliseconds(150);
  std::unique_ptr<RedisProcess> redis_;
};

TEST_F(LeaseKeeperTest, TrackedLeaseOutlivesManyLeaseTimesAndExpiresOnceUntracked) {
  auto a = NewStore("replica-a");
  auto b = NewStore("replica-b");
  absl::StatusOr<SessionLease> lease = a->AcquireLease(kSession);
  ASSERT_TRUE(lease.ok()) << lease.status();
  LeaseKeeper keeper(a.get(), kLease);
  keeper.Track(*lease);
  Sleep(kLease * 6);
  // Still a's: b is refused, naming a.
  absl::StatusOr<SessionLease> other = b->AcquireLease(kSession);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAborted) << other.status();
  EXPECT_NE(other.status().message().find("replica-a"), std::string::npos) << other.status();
  EXPECT_GE(keeper.renewals(), 4u);
  EXPECT_TRUE(keeper.TakeLost().empty());
  // Untracked: no more renewals, so it expires on its own and b gets it.
  keeper.Untrack(lease->token);
  Sleep(kLease * 2);
  EXPECT_TRUE(b->AcquireLease(kSession).ok());
}

TEST_F(LeaseKeeperTest, LeaseTakenAwayIsReportedLostOnce) {
  auto a = NewStore("replica-a");
  absl::StatusOr<SessionLease> lease = a->AcquireLease(kSession);
  ASSERT_TRUE(lease.ok()) << lease.status();
  LeaseKeeper keeper(a.get(), kLease);
  keeper.Track(*lease);
  // Someone else's now (as after this replica stalled past the lease and another took over).
  server::RedisClient raw(server::RedisAddress{"127.0.0.1", redis_->port(), 0}, "");
  ASSERT_TRUE(raw.Command({"SET", absl::StrCat("flatstate:{", kSession, "}:lease"),
                           "replica-b|other-token"})
                  .ok());
  std::vector<LostLease> lost;
  for (int i = 0; i < 50 && lost.empty(); ++i) {
    Sleep(kLease / 5);
    lost = keeper.TakeLost();
  }
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].lease.token, lease->token);
  EXPECT_EQ(lost[0].status.code(), absl::StatusCode::kFailedPrecondition) << lost[0].status;
  Sleep(kLease);
  EXPECT_TRUE(keeper.TakeLost().empty()) << "a lost lease is not renewed again";
}

TEST_F(LeaseKeeperTest, UnreachableStoreIsNotALoss) {
  auto a = NewStore("replica-a");
  absl::StatusOr<SessionLease> lease = a->AcquireLease(kSession);
  ASSERT_TRUE(lease.ok()) << lease.status();
  LeaseKeeper keeper(a.get(), kLease);
  keeper.Track(*lease);
  redis_->Kill();
  Sleep(kLease * 2);
  EXPECT_TRUE(keeper.TakeLost().empty());
  EXPECT_GE(keeper.renewals(), 2u);
}

}  // namespace
}  // namespace flatstate::testing
