#include "server/sessions/session_store_factory.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "engine/util/status_macros.h"
#include "server/store/checkpoint_store.h"
#if FLATSTATE_WITH_REDIS
#include "server/store/redis/redis_session_store.h"
#endif

namespace flatstate::server {
namespace {

absl::Status BadSpec(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("session_store: '", spec, "' ", why,
                                                 " (expected dir:PATH or redis://HOST:PORT[/DB])"));
}

#if FLATSTATE_WITH_REDIS
absl::StatusOr<std::string> ReadPassword(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("redis_password_file: cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string pw = ss.str();
  while (!pw.empty() && (pw.back() == '\n' || pw.back() == '\r')) pw.pop_back();
  if (pw.empty() || absl::StrContains(pw, '\n')) {
    return absl::InvalidArgumentError(
        absl::StrCat("redis_password_file: ", path, " must hold the password on one line"));
  }
  return pw;
}

std::string DefaultReplicaId() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat(host[0] != '\0' ? host : "replica", "-", getpid());
}
#endif  // FLATSTATE_WITH_REDIS

absl::StatusOr<std::unique_ptr<SessionStore>> OpenDir(const std::string& dir) {
  ASSIGN_OR_RETURN(CheckpointStore store, CheckpointStore::Open(dir));
  // Temporary files of writes cut short by a crash are never read; delete them. A failure here
  // is logged, not fatal: the files are harmless, only wasted space.
  if (absl::StatusOr<int> removed = store.RemoveStaleTemporaries(); removed.ok()) {
    std::fprintf(stderr, "[flatstate] removed %d leftover temporary checkpoint file(s) from %s\n",
                 *removed, dir.c_str());
  } else {
    std::fprintf(stderr, "[flatstate] warning: %s\n", removed.status().ToString().c_str());
  }
  return std::make_unique<DirSessionStore>(std::move(store));
}

}  // namespace

absl::StatusOr<SessionStoreSpec> ParseSessionStoreSpec(absl::string_view spec) {
  SessionStoreSpec out;
  absl::string_view rest = spec;
  if (absl::ConsumePrefix(&rest, "dir:")) {
    if (rest.empty()) return BadSpec(spec, "names no directory");
    out.dir = std::string(rest);
    return out;
  }
  if (absl::StartsWith(spec, "rediss://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session_store: '", spec,
        "': TLS to Redis is not supported: Debian 12's hiredis (0.14) has no TLS (hiredis_ssl "
        "came with hiredis 1.0); use redis:// over a private network or a TLS tunnel"));
  }
  if (!absl::ConsumePrefix(&rest, "redis://")) return BadSpec(spec, "is not a store");
  out.kind = SessionStoreSpec::Kind::kRedis;
  if (absl::StrContains(rest, '@')) {
    return BadSpec(spec, "has credentials; put the password in --redis_password_file");
  }
  if (const size_t slash = rest.find('/'); slash != absl::string_view::npos) {
    const absl::string_view db = rest.substr(slash + 1);
    if (!absl::SimpleAtoi(db, &out.redis.db) || out.redis.db < 0 || db.empty() ||
        !absl::ascii_isdigit(static_cast<unsigned char>(db[0]))) {
      return BadSpec(spec, absl::StrCat("has DB '", db, "', not a number >= 0"));
    }
    rest = rest.substr(0, slash);
  }
  absl::string_view host = rest;
  if (const size_t colon = rest.rfind(':'); colon != absl::string_view::npos) {
    host = rest.substr(0, colon);
    const absl::string_view port = rest.substr(colon + 1);
    if (!absl::SimpleAtoi(port, &out.redis.port) || out.redis.port < 1 || out.redis.port > 65535 ||
        !absl::ascii_isdigit(static_cast<unsigned char>(port[0]))) {
      return BadSpec(spec, absl::StrCat("has port '", port, "', not 1..65535"));
    }
  }
  if (host.empty()) return BadSpec(spec, "names no host");
  out.redis.host = std::string(host);
  return out;
}

absl::StatusOr<std::unique_ptr<SessionStore>> OpenSessionStore(const SessionStoreConfig& config) {
  ASSIGN_OR_RETURN(SessionStoreSpec spec, ParseSessionStoreSpec(config.spec));
  if (spec.kind == SessionStoreSpec::Kind::kDir) {
    if (!config.password_file.empty()) {
      return absl::InvalidArgumentError(
          "redis_password_file: only a redis:// --session_store takes a password");
    }
    return OpenDir(spec.dir);
  }
  if (config.session_ttl < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("session_ttl must be at least 1ms");
  }
  if (config.lease < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError("session_lease must be at least 1ms");
  }
#if !FLATSTATE_WITH_REDIS
  return absl::FailedPreconditionError(absl::StrCat(
      "session_store: '", config.spec,
      "': this flatstate-server was built without Redis (-DFLATSTATE_WITH_REDIS=OFF); rebuild "
      "with -DFLATSTATE_WITH_REDIS=ON or use dir:PATH"));
#else
  RedisSessionStoreOptions o;
  o.address = spec.redis;
  if (!config.password_file.empty()) {
    ASSIGN_OR_RETURN(o.password, ReadPassword(config.password_file));
  }
  o.session_ttl = config.session_ttl;
  o.lease = config.lease;
  o.replica_id = config.replica_id.empty() ? DefaultReplicaId() : config.replica_id;
  auto store = std::make_unique<RedisSessionStore>(std::move(o));
  if (absl::Status s = store->Ping(); !s.ok()) {
    if (!config.optional || !absl::IsUnavailable(s)) return s;
    std::fprintf(stderr,
                 "[flatstate] warning: %s; serving anyway (--session_store_optional): sessions "
                 "stay in memory until the store is back\n",
                 std::string(s.message()).c_str());
  }
  return store;
#endif  // FLATSTATE_WITH_REDIS
}

}  // namespace flatstate::server
