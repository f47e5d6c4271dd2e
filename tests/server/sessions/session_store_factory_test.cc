// Tests of server/sessions/session_store_factory: the --session_store parser, opening a dir:
// store, and opening a redis:// store against a real redis-server (reachable, unreachable,
// optional, password right and wrong). The redis cases skip with the reason when redis-server is
// missing; a build without Redis (-DFLATSTATE_WITH_REDIS=OFF) checks the refusal instead.
#include "server/sessions/session_store_factory.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/store/ids.h"
#include "tests/util/redis_process.h"

namespace flatstate::testing {
namespace {

using server::OpenSessionStore;
using server::ParseSessionStoreSpec;
using server::SessionStoreConfig;
using server::SessionStoreSpec;

TEST(SessionStoreSpecTest, ParsesDirAndRedis) {
  absl::StatusOr<SessionStoreSpec> d = ParseSessionStoreSpec("dir:/var/lib/fs");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->kind, SessionStoreSpec::Kind::kDir);
  EXPECT_EQ(d->dir, "/var/lib/fs");

  absl::StatusOr<SessionStoreSpec> r = ParseSessionStoreSpec("redis://10.0.0.5:6380/3");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kind, SessionStoreSpec::Kind::kRedis);
  EXPECT_EQ(r->redis.host, "10.0.0.5");
  EXPECT_EQ(r->redis.port, 6380);
  EXPECT_EQ(r->redis.db, 3);
  EXPECT_EQ(r->redis.ToString(), "redis://10.0.0.5:6380/3");

  r = ParseSessionStoreSpec("redis://cache.internal");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->redis.port, 6379);
  EXPECT_EQ(r->redis.db, 0);
}

TEST(SessionStoreSpecTest, RejectsBadSpecsNamingTheFlag) {
  for (const char* bad :
       {"", "dir:", "/tmp/x", "redis://", "redis://:6379", "redis://h:0", "redis://h:70000",
        "redis://h:port", "redis://h:6379/", "redis://h:6379/-1", "redis://h:6379/x",
        "redis://h: 6379", "redis://u:pw@h:6379", "memcached://h:1"}) {
    absl::StatusOr<SessionStoreSpec> r = ParseSessionStoreSpec(bad);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << bad << ": " << r.status();
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "session_store: ")) << r.status();
  }
  absl::Status tls = ParseSessionStoreSpec("rediss://h:6379").status();
  EXPECT_TRUE(absl::IsInvalidArgument(tls)) << tls;
  EXPECT_TRUE(absl::StrContains(tls.message(), "no TLS")) << tls;
  EXPECT_TRUE(absl::StrContains(ParseSessionStoreSpec("redis://u:pw@h:6379").status().message(),
                                "redis_password_file"));
}

TEST(OpenSessionStoreTest, DirStoreRemovesStaleTemporaries) {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("flatstate-factory-" + server::NewId());
  std::filesystem::create_directories(dir);
  const std::string tmp = dir + "/" + server::NewId() + ".ckpt.tmp.0123abcd";
  std::ofstream(tmp) << "partial";
  SessionStoreConfig c;
  c.spec = "dir:" + dir;
  absl::StatusOr<std::unique_ptr<server::SessionStore>> s = OpenSessionStore(c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE((*s)->shared());
  EXPECT_EQ((*s)->address(), "dir:" + dir);
  EXPECT_FALSE(std::filesystem::exists(tmp));
  c.password_file = "/nonexistent";
  EXPECT_TRUE(absl::IsInvalidArgument(OpenSessionStore(c).status()));
  std::filesystem::remove_all(dir);
}

#if FLATSTATE_WITH_REDIS
TEST(OpenSessionStoreTest, RedisReachableUnreachableAndOptional) {
  RedisProcess redis;
  if (!redis.available()) GTEST_SKIP() << redis.skip_reason();
  SessionStoreConfig c;
  c.spec = redis.spec();
  c.replica_id = "r1";
  absl::StatusOr<std::unique_ptr<server::SessionStore>> s = OpenSessionStore(c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->shared());
  EXPECT_EQ((*s)->address(), redis.spec());
  const std::string sid = server::NewId();
  ASSERT_TRUE((*s)->Save(sid, 0, {"head", 0, 0, 0, {}}).ok());

  redis.Kill();
  absl::Status down = OpenSessionStore(c).status();
  EXPECT_TRUE(absl::IsUnavailable(down)) << down;
  EXPECT_TRUE(absl::StrContains(down.message(), redis.spec())) << down;
  c.optional = true;
  s = OpenSessionStore(c);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(redis.Restart());
  usleep(300 * 1000);  // past the reconnect backoff: the store connects on its next call
  EXPECT_TRUE((*s)->Save(sid, 0, {"head", 0, 0, 0, {}}).ok());

  c.session_ttl = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(OpenSessionStore(c).status()));
}

TEST(OpenSessionStoreTest, RedisPassword) {
  RedisProcess redis("s3cret-pw");
  if (!redis.available()) GTEST_SKIP() << redis.skip_reason();
  const std::string file =
      std::filesystem::temp_directory_path() / ("flatstate-pw-" + server::NewId());
  SessionStoreConfig c;
  c.spec = redis.spec();
  c.password_file = file;
  EXPECT_TRUE(absl::IsNotFound(OpenSessionStore(c).status()));
  std::ofstream(file) << "s3cret-pw\n";
  absl::StatusOr<std::unique_ptr<server::SessionStore>> s = OpenSessionStore(c);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE((*s)->Save(server::NewId(), 0, {"head", 0, 0, 0, {}}).ok());

  std::ofstream(file) << "wrong\n";
  c.optional = true;  // a refused password fails even when the store is optional
  absl::Status wrong = OpenSessionStore(c).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(wrong)) << wrong;
  EXPECT_TRUE(absl::StrContains(wrong.message(), redis.spec())) << wrong;
  c.password_file.clear();
  absl::Status none = OpenSessionStore(c).status();  // PING without AUTH: NOAUTH
  EXPECT_TRUE(absl::IsFailedPrecondition(none)) << none;
  std::filesystem::remove(file);
}
#else
TEST(OpenSessionStoreTest, RedisIsRefusedNamingTheBuildOption) {
  SessionStoreConfig c;
  c.spec = "redis://127.0.0.1:6379";
  absl::Status s = OpenSessionStore(c).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "FLATSTATE_WITH_REDIS")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "redis://127.0.0.1:6379")) << s;
}
#endif  // FLATSTATE_WITH_REDIS

}  // namespace
}  // namespace flatstate::testing
