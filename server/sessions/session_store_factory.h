// OpenSessionStore: the SessionStore named by --session_store (session_store.h).
//
//   dir:PATH                   DirSessionStore over CheckpointStore::Open(PATH); leftover
//                              temporary files of writes a crash cut short are removed (logged).
//   redis://HOST:PORT[/DB]     RedisSessionStore (redis_session_store.h); PORT defaults to 6379,
//                              DB to 0. Connects and PINGs at open.
//                              A build with -DFLATSTATE_WITH_REDIS=OFF refuses it:
//                              FailedPrecondition naming the build option.
//   rediss://...               InvalidArgument: Debian 12's hiredis (0.14) has no TLS (hiredis_ssl
//                              came with hiredis 1.0); use a TLS tunnel (stunnel, spiped) or a
//                              private network.
//
// Stateless functions, thread-safe. Failures (operator-facing, at server start):
//   InvalidArgument     a spec, flag or password file that does not parse, naming the flag;
//   NotFound            --redis_password_file cannot be read;
//   Unavailable         Redis cannot be reached at open ("session store redis://... is
//                       unreachable: ..."), unless `optional`: then the store is returned anyway
//                       (it connects when Redis comes up) and a line on stderr says so;
//   FailedPrecondition  Redis refused the password (even when optional: retrying cannot help);
//   what CheckpointStore::Open returns for dir: stores.
#ifndef FLATSTATE_SERVER_SESSIONS_SESSION_STORE_FACTORY_H_
#define FLATSTATE_SERVER_SESSIONS_SESSION_STORE_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/store/redis_address.h"
#include "server/store/session_store.h"

namespace flatstate::server {

struct SessionStoreConfig {
  std::string spec;           // --session_store: "dir:PATH" | "redis://HOST:PORT[/DB]"
  std::string password_file;  // --redis_password_file (redis only): the password, one line
  absl::Duration session_ttl = absl::Hours(24);  // --session_ttl (redis only)
  absl::Duration lease = absl::Seconds(5);       // --session_lease (redis only)
  std::string replica_id;  // this replica in lease values and messages; empty: "<host>-<pid>"
  bool optional = false;   // --session_store_optional: serve even if Redis is down at start
};

struct SessionStoreSpec {
  enum class Kind { kDir, kRedis };
  Kind kind = Kind::kDir;
  std::string dir;     // kDir
  RedisAddress redis;  // kRedis
};

// Parses --session_store. InvalidArgument "session_store: ..." saying what is wrong.
absl::StatusOr<SessionStoreSpec> ParseSessionStoreSpec(absl::string_view spec);

absl::StatusOr<std::unique_ptr<SessionStore>> OpenSessionStore(const SessionStoreConfig& config);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_SESSIONS_SESSION_STORE_FACTORY_H_
