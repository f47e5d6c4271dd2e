// Tests of server/redis_session_store against a real redis-server (tests/util/redis_process.h):
// round trips (linear head; softmax chunks saved incrementally), fencing, leases, TTLs, Delete,
// corrupt / truncated / missing values, Redis killed and restarted, named checkpoints in parts.
// Skipped with the reason when redis-server is not installed.
#include "server/store/redis/redis_session_store.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/store/ids.h"
#include "tests/util/redis_process.h"

namespace flatstate::testing {
namespace {

using server::RedisArgs;
using server::RedisClient;
using server::RedisReply;
using server::RedisSessionStore;
using server::RedisSessionStoreOptions;
using server::SessionImage;
using server::SessionLease;
using server::StoredSession;

std::string Bytes(size_t n, int seed) {
  std::string s(n, '\0');
  uint32_t x = 2463534242u + static_cast<uint32_t>(seed);
  for (char& c : s) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    c = static_cast<char>(x);
  }
  return s;
}

SessionImage Image(std::string head, int64_t total, int64_t first_new, int seed) {
  SessionImage im;
  im.head = std::move(head);
  im.chunk_tokens = total > 0 ? 16 : 0;
  im.total_chunks = total;
  im.first_new_chunk = first_new;
  for (int64_t c = first_new; c < total; ++c) im.new_chunks.push_back(Bytes(1000 + c, seed + c));
  return im;
}

class RedisSessionStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    redis_ = std::make_unique<RedisProcess>();
    if (!redis_->available()) GTEST_SKIP() << redis_->skip_reason();
    raw_ = std::make_unique<RedisClient>(Address(), "");
    store_ = NewStore("replica-a");
  }

  server::RedisAddress Address() const {
    server::RedisAddress a;
    a.port = redis_->port();
    return a;
  }
  std::unique_ptr<RedisSessionStore> NewStore(const std::string& replica,
                                              absl::Duration lease = absl::Seconds(5)) {
    RedisSessionStoreOptions o;
    o.address = Address();
    o.replica_id = replica;
    o.session_ttl = absl::Seconds(60);
    o.lease = lease;
    o.checkpoint_part_bytes = 1000;
    return std::make_unique<RedisSessionStore>(o);
  }
  RedisReply Raw(const RedisArgs& args) {
    absl::StatusOr<RedisReply> r = raw_->Command(args);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RedisReply{};
  }
  // Every key under "flatstate:{<id>}", sorted (KEYS is fine on a test server).
  std::vector<std::string> KeysOf(const std::string& id) {
    std::vector<std::string> out;
    for (const RedisReply& e : Raw({"KEYS", absl::StrCat("flatstate:{", id, "}*")}).elements) {
      out.push_back(e.str);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  size_t ChunkKeys(const std::string& sid) {
    size_t n = 0;
    for (const std::string& k : KeysOf(sid)) n += absl::StrContains(k, ":kv:");
    return n;
  }

  std::unique_ptr<RedisProcess> redis_;
  std::unique_ptr<RedisClient> raw_;
  std::unique_ptr<RedisSessionStore> store_;
  const std::string sid_ = server::NewId();
};

TEST_F(RedisSessionStoreTest, LinearHeadRoundTrip) {
  EXPECT_TRUE(absl::IsNotFound(store_->Version(sid_).status()));
  EXPECT_TRUE(absl::IsNotFound(store_->Load(sid_).status()));
  const std::string head = Bytes(75 * 1024, 1);
  ASSERT_EQ(*store_->Save(sid_, 0, Image(head, 0, 0, 0)), 1u);
  EXPECT_EQ(*store_->Version(sid_), 1u);
  absl::StatusOr<StoredSession> s = store_->Load(sid_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->version, 1u);
  EXPECT_EQ(s->head, head);
  EXPECT_TRUE(s->chunks.empty());
  ASSERT_EQ(*store_->Save(sid_, 1, Image("next", 0, 0, 0)), 2u);
  EXPECT_EQ(store_->Load(sid_)->head, "next");
  EXPECT_EQ(KeysOf(sid_).size(), 2u);  // ver, head
}

TEST_F(RedisSessionStoreTest, SoftmaxChunksSavedIncrementally) {
  SessionImage first = Image("h1", 3, 0, 10);
  ASSERT_EQ(*store_->Save(sid_, 0, first), 1u);
  // Turn 2: chunk 2 (partial before) is rewritten, chunks 3 and 4 are new; 0 and 1 are kept.
  SessionImage second = Image("h2", 5, 2, 20);
  ASSERT_EQ(*store_->Save(sid_, 1, second), 2u);
  absl::StatusOr<StoredSession> s = store_->Load(sid_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->head, "h2");
  EXPECT_EQ(s->chunk_tokens, 16);
  ASSERT_EQ(s->chunks.size(), 5u);
  EXPECT_EQ(s->chunks[0], first.new_chunks[0]);
  EXPECT_EQ(s->chunks[1], first.new_chunks[1]);
  for (int c = 2; c < 5; ++c) EXPECT_EQ(s->chunks[c], second.new_chunks[c - 2]) << c;
  EXPECT_EQ(ChunkKeys(sid_), 5u);  // the superseded chunk 2 is gone
}

TEST_F(RedisSessionStoreTest, StaleWriteIsRefusedAndLeavesNothing) {
  ASSERT_TRUE(store_->Save(sid_, 0, Image("v1", 2, 0, 1)).ok());
  ASSERT_TRUE(store_->Save(sid_, 1, Image("v2", 3, 1, 2)).ok());
  const std::vector<std::string> before = KeysOf(sid_);
  for (int64_t first_new : {0, 2}) {
    absl::StatusOr<uint64_t> r = store_->Save(sid_, 1, Image("stale", 4, first_new, 3));
    ASSERT_TRUE(absl::IsAborted(r.status())) << r.status();
    EXPECT_TRUE(
        absl::StrContains(r.status().message(), "stored version is 2, this write expected 1"))
        << r.status();
  }
  EXPECT_TRUE(absl::IsAborted(store_->Save(sid_, 0, Image("new", 0, 0, 0)).status()));
  EXPECT_EQ(KeysOf(sid_), before);
  absl::StatusOr<StoredSession> s = store_->Load(sid_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->version, 2u);
  EXPECT_EQ(s->head, "v2");
  EXPECT_EQ(s->chunks.size(), 3u);
}

TEST_F(RedisSessionStoreTest, RacingWritersOneWins) {
  ASSERT_TRUE(store_->Save(sid_, 0, Image("v1", 1, 0, 1)).ok());
  std::unique_ptr<RedisSessionStore> other = NewStore("replica-b");
  absl::StatusOr<uint64_t> a, b;
  std::thread ta([&] { a = store_->Save(sid_, 1, Image("from-a", 2, 1, 5)); });
  std::thread tb([&] { b = other->Save(sid_, 1, Image("from-b", 2, 1, 6)); });
  ta.join();
  tb.join();
  ASSERT_NE(a.ok(), b.ok()) << a.status() << " / " << b.status();
  EXPECT_TRUE(absl::IsAborted(a.ok() ? b.status() : a.status()));
  absl::StatusOr<StoredSession> s = store_->Load(sid_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->head, a.ok() ? "from-a" : "from-b");
  EXPECT_EQ(s->chunks[1], Bytes(1001, a.ok() ? 6 : 7));
  EXPECT_EQ(ChunkKeys(sid_), 2u);
}

TEST_F(RedisSessionStoreTest, LeaseIsExclusiveRenewableAndExpires) {
  std::unique_ptr<RedisSessionStore> a = NewStore("replica-a", absl::Milliseconds(300));
  std::unique_ptr<RedisSessionStore> b = NewStore("replica-b", absl::Milliseconds(300));
  absl::StatusOr<SessionLease> la = a->AcquireLease(sid_);
  ASSERT_TRUE(la.ok()) << la.status();
  absl::StatusOr<SessionLease> lb = b->AcquireLease(sid_);
  ASSERT_TRUE(absl::IsAborted(lb.status())) << lb.status();
  EXPECT_TRUE(absl::StrContains(lb.status().message(), "is leased by replica replica-a"))
      << lb.status();
  EXPECT_TRUE(a->RenewLease(*la).ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(b->RenewLease({sid_, la->token})));  // not b's
  a->ReleaseLease(*la);
  lb = b->AcquireLease(sid_);
  ASSERT_TRUE(lb.ok()) << lb.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(a->RenewLease(*la)));
  a->ReleaseLease(*la);  // not a's any more: b keeps it
  EXPECT_TRUE(absl::IsAborted(a->AcquireLease(sid_).status()));
  std::this_thread::sleep_for(std::chrono::milliseconds(450));  // b never releases
  EXPECT_TRUE(a->AcquireLease(sid_).ok());
}

// A lease this replica id left behind (a lost release reply, or a dead earlier process with the
// same id) does not lock the replica out of its own session; the old holding can no longer renew.
TEST_F(RedisSessionStoreTest, ALeaseLeftByTheSameReplicaIdIsTakenOver) {
  std::unique_ptr<RedisSessionStore> before = NewStore("replica-a", absl::Seconds(30));
  std::unique_ptr<RedisSessionStore> after = NewStore("replica-a", absl::Seconds(30));
  absl::StatusOr<SessionLease> stale = before->AcquireLease(sid_);
  ASSERT_TRUE(stale.ok()) << stale.status();
  absl::StatusOr<SessionLease> taken = after->AcquireLease(sid_);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(before->RenewLease(*stale)));
  EXPECT_TRUE(after->RenewLease(*taken).ok());
  // Another replica id is still refused.
  EXPECT_TRUE(absl::IsAborted(NewStore("replica-b")->AcquireLease(sid_).status()));
}

TEST_F(RedisSessionStoreTest, EveryKeyHasATtlAndAcquireRefreshesIt) {
  ASSERT_TRUE(store_->Save(sid_, 0, Image("h", 3, 0, 1)).ok());
  absl::StatusOr<SessionLease> lease = store_->AcquireLease(sid_);
  ASSERT_TRUE(lease.ok()) << lease.status();
  const std::vector<std::string> keys = KeysOf(sid_);
  ASSERT_EQ(keys.size(), 6u);  // ver, head, lease, 3 chunks
  for (const std::string& k : keys) {
    const int64_t ttl = Raw({"PTTL", k}).integer;
    EXPECT_GT(ttl, 0) << k;
    EXPECT_LE(ttl, 60000) << k;
    Raw({"PEXPIRE", k, "5000"});
  }
  store_->ReleaseLease(*lease);
  ASSERT_TRUE(NewStore("replica-b")->AcquireLease(sid_).ok());
  for (const std::string& k : KeysOf(sid_)) {
    if (absl::EndsWith(k, ":lease")) continue;
    EXPECT_GT(Raw({"PTTL", k}).integer, 50000) << k;  // back to the session TTL
  }
}

TEST_F(RedisSessionStoreTest, DeleteRemovesEveryKey) {
  ASSERT_TRUE(store_->Save(sid_, 0, Image("h", 2, 0, 1)).ok());
  ASSERT_TRUE(store_->Save(sid_, 1, Image("h", 4, 1, 2)).ok());
  ASSERT_TRUE(store_->AcquireLease(sid_).ok());
  ASSERT_EQ(KeysOf(sid_).size(), 7u);
  ASSERT_TRUE(store_->Delete(sid_).ok());
  EXPECT_TRUE(KeysOf(sid_).empty());
  EXPECT_TRUE(absl::IsNotFound(store_->Delete(sid_)));
  EXPECT_TRUE(absl::IsNotFound(store_->Load(sid_).status()));
}

TEST_F(RedisSessionStoreTest, CorruptTruncatedAndMissingValuesAreDataLoss) {
  ASSERT_TRUE(store_->Save(sid_, 0, Image(Bytes(5000, 1), 2, 0, 1)).ok());
  const std::string head_key = absl::StrCat("flatstate:{", sid_, "}:head");
  const std::string good = Raw({"GET", head_key}).str;
  Raw({"SETRANGE", head_key, "100", "X"});
  absl::Status s = store_->Load(sid_).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), head_key)) << s;
  Raw({"SET", head_key, good.substr(0, good.size() / 2)});
  s = store_->Load(sid_).status();
  EXPECT_TRUE(absl::IsDataLoss(s) && absl::StrContains(s.message(), head_key)) << s;
  Raw({"SET", head_key, good});
  ASSERT_TRUE(store_->Load(sid_).ok());

  std::string chunk_key;
  for (const std::string& k : KeysOf(sid_)) {
    if (absl::StrContains(k, ":kv:1:")) chunk_key = k;
  }
  ASSERT_FALSE(chunk_key.empty());
  Raw({"SETRANGE", chunk_key, "40", "Y"});
  s = store_->Load(sid_).status();
  EXPECT_TRUE(absl::IsDataLoss(s) && absl::StrContains(s.message(), chunk_key)) << s;
  Raw({"DEL", chunk_key});
  s = store_->Load(sid_).status();
  EXPECT_TRUE(absl::IsDataLoss(s) && absl::StrContains(s.message(), chunk_key)) << s;
  Raw({"SET", absl::StrCat("flatstate:{", sid_, "}:ver"), "x"});
  EXPECT_TRUE(absl::IsDataLoss(store_->Version(sid_).status()));
}

TEST_F(RedisSessionStoreTest, RedisKilledIsUnavailableFastAndRestartedWorksAgain) {
  ASSERT_TRUE(store_->Save(sid_, 0, Image("h", 1, 0, 1)).ok());
  redis_->Kill();
  // Megabytes into the connection the dead server left: write(2) meets EPIPE; no SIGPIPE
  // (the default action would end this test binary).
  SessionImage big = Image("h", 0, 0, 0);
  big.total_chunks = 16;
  big.chunk_tokens = 16;
  for (int c = 0; c < 16; ++c) big.new_chunks.push_back(Bytes(1 << 20, c));
  EXPECT_TRUE(absl::IsUnavailable(store_->Save(sid_, 1, big).status()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the backoff
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = store_->Save(sid_, 1, Image("h", 1, 0, 2)).status();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(absl::IsUnavailable(s)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), redis_->spec())) << s;
    EXPECT_LT(secs, 1.0);
  }
  EXPECT_TRUE(absl::IsUnavailable(store_->Load(sid_).status()));
  EXPECT_TRUE(absl::IsUnavailable(store_->AcquireLease(sid_).status()));
  ASSERT_TRUE(redis_->Restart());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past the reconnect backoff
  // Nothing was persisted (--save ""): the session starts over, scripts are loaded again.
  EXPECT_TRUE(absl::IsNotFound(store_->Load(sid_).status()));
  ASSERT_EQ(*store_->Save(sid_, 0, Image("again", 2, 0, 3)), 1u);
  EXPECT_EQ(store_->Load(sid_)->head, "again");
  EXPECT_TRUE(store_->AcquireLease(sid_).ok());
}

TEST_F(RedisSessionStoreTest, NamedCheckpointInPartsHasNoTtl) {
  const std::string cid = server::NewId();
  EXPECT_TRUE(absl::IsNotFound(store_->GetCheckpoint(cid).status()));
  const std::string blob = Bytes(3500, 9);  // 4 parts of <= 1000 bytes
  ASSERT_TRUE(store_->PutCheckpoint(cid, blob).ok());
  EXPECT_EQ(*store_->GetCheckpoint(cid), blob);
  const std::vector<std::string> keys = KeysOf(cid);
  ASSERT_EQ(keys.size(), 5u);
  for (const std::string& k : keys) EXPECT_EQ(Raw({"PTTL", k}).integer, -1) << k;
  const std::string part = absl::StrCat("flatstate:{", cid, "}:ckpt:2");
  Raw({"SETRANGE", part, "7", "Z"});
  absl::Status s = store_->GetCheckpoint(cid).status();
  EXPECT_TRUE(absl::IsDataLoss(s) && absl::StrContains(s.message(), part)) << s;
  EXPECT_TRUE(store_->PutCheckpoint(cid, "").ok());
  EXPECT_EQ(*store_->GetCheckpoint(cid), "");
}

TEST_F(RedisSessionStoreTest, BadIdsAndImagesAreInvalidArgument) {
  EXPECT_TRUE(absl::IsInvalidArgument(store_->Load("../x").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store_->AcquireLease("ABC").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store_->PutCheckpoint("nope", "x")));
  SessionImage bad = Image("h", 3, 0, 1);
  bad.new_chunks.pop_back();
  EXPECT_TRUE(absl::IsInvalidArgument(store_->Save(sid_, 0, bad).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store_->Save(sid_, 0, Image("h", 3, 1, 1)).status()));
  EXPECT_TRUE(KeysOf(sid_).empty());
  EXPECT_TRUE(absl::IsUnimplemented(store_->PutEvicted(sid_, "x")));
}

// Not a check: the cost of one Save / Load on this machine, for docs/cluster.md.
TEST_F(RedisSessionStoreTest, MeasureSaveAndLoad) {
  const auto time_ms = [](const auto& f, int reps) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f(i);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
               .count() /
           reps;
  };
  const std::string head = Bytes(75 * 1024, 1);
  uint64_t v = 0;
  const double linear = time_ms([&](int) { v = *store_->Save(sid_, v, Image(head, 0, 0, 0)); }, 50);
  const double linear_load = time_ms([&](int) { ASSERT_TRUE(store_->Load(sid_).ok()); }, 50);
  const double version = time_ms([&](int) { ASSERT_TRUE(store_->Version(sid_).ok()); }, 200);
  const std::string sid2 = server::NewId();
  SessionImage kv = Image("head", 0, 0, 0);
  kv.total_chunks = 64;
  kv.chunk_tokens = 16;
  for (int c = 0; c < 64; ++c) kv.new_chunks.push_back(Bytes(1 << 20, c));
  uint64_t v2 = 0;
  const double full = time_ms([&](int) { v2 = *store_->Save(sid2, v2, kv); }, 3);
  SessionImage one = Image("head", 0, 0, 0);  // a turn that rewrites the last chunk only
  one.total_chunks = 64;
  one.chunk_tokens = 16;
  one.first_new_chunk = 63;
  one.new_chunks.push_back(Bytes(1 << 20, 99));
  const double incremental = time_ms([&](int) { v2 = *store_->Save(sid2, v2, one); }, 10);
  const double kv_load = time_ms([&](int) { ASSERT_TRUE(store_->Load(sid2).ok()); }, 3);
  std::printf("[measure] Save 75 KiB head: %.2f ms; Load: %.2f ms; Version: %.3f ms\n", linear,
              linear_load, version);
  std::printf(
      "[measure] Save 64 x 1 MiB chunks: %.1f ms; Save of 1 new chunk of 64: %.2f ms; "
      "Load 64 x 1 MiB: %.1f ms\n",
      full, incremental, kv_load);
}

}  // namespace
}  // namespace flatstate::testing
