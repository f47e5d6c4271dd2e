// RedisClient: a small, thread-safe wrapper around one blocking hiredis connection (hiredis 0.14,
// Debian 12: no TLS, no RESP3).
//
// Owns one redisContext, guarded by one mutex: calls from many threads are serialised (a call
// holds the connection for its whole round trip, pipelines included). Commands are binary-safe
// (redisCommandArgv / redisAppendCommandArgv): arguments and values may hold any bytes.
//
// Connection: made lazily by the first call (or by Connect()), with AUTH <password> when a
// password is set and SELECT <db> when db != 0. A transport error (refused, timeout, connection
// closed by the server) drops the connection; the next call reconnects. After a FAILED connect the
// client does not try again for kReconnectBackoff: calls in that window fail fast with the error
// of the failed attempt. Nothing is retried behind the caller's back (a command that may have
// been applied is never sent twice).
//
// SIGPIPE: hiredis writes with write(2), which raises SIGPIPE on a connection the server closed.
// gRPC does not ignore SIGPIPE process-wide (its own sockets use sendmsg with MSG_NOSIGNAL), and
// flatstate-server does not either, so every call blocks SIGPIPE in the calling thread around
// its I/O and consumes a SIGPIPE it raised before unblocking (the MSG_NOSIGNAL-equivalent for
// write(2)). A dropped connection is an Unavailable status, never a signal.
//
// Failures (statuses):
//   Unavailable        the server cannot be reached, or the connection broke or timed out:
//                      "session store redis://HOST:PORT/DB is unreachable: <why>"; also the
//                      server's LOADING / MASTERDOWN / BUSY / TRYAGAIN / READONLY replies;
//   FailedPrecondition the server refused our credentials (NOAUTH, WRONGPASS, "invalid
//                      password", NOPERM): configuration, not retryable;
//   ResourceExhausted  an "OOM ..." reply (maxmemory reached);
//   Internal           any other error reply, with its text; a reply of an unexpected type.
// Every message names the address.
#ifndef FLATSTATE_SERVER_STORE_REDIS_REDIS_CLIENT_H_
#define FLATSTATE_SERVER_STORE_REDIS_REDIS_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/redis_address.h"

struct redisContext;

namespace flatstate::server {

// How long a connect may take before it counts as failed.
inline constexpr absl::Duration kRedisConnectTimeout = absl::Milliseconds(500);
// How long one command (or one pipeline's reply) may take: long enough for 64 MiB of chunks on a
// slow link, short enough that a hung server does not hold a turn for long.
inline constexpr absl::Duration kRedisCommandTimeout = absl::Seconds(5);
// After a failed connect, calls fail fast (without trying) for this long.
inline constexpr absl::Duration kReconnectBackoff = absl::Milliseconds(250);

// One reply, copied out of hiredis (no hiredis type leaks into this header). Error replies never
// appear here: they are statuses.
struct RedisReply {
  enum class Type { kNil, kString, kStatus, kInteger, kArray };
  Type type = Type::kNil;
  std::string str;                   // kString, kStatus
  int64_t integer = 0;               // kInteger
  std::vector<RedisReply> elements;  // kArray
  bool is_nil() const { return type == Type::kNil; }
};

// One command: its arguments (the command name first), each any bytes. The views must outlive
// the call that sends them.
using RedisArgs = std::vector<absl::string_view>;

class RedisClient {
 public:
  RedisClient(RedisAddress address, std::string password);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  const RedisAddress& address() const { return address_; }

  // Connects now if not connected (AUTH, SELECT) and sends PING. Statuses as above.
  absl::Status Ping();

  // Sends one command and returns its reply; an error reply is a status (see above).
  absl::StatusOr<RedisReply> Command(const RedisArgs& args);

  // Sends `commands` in one pipeline (one write, then the replies in order). A transport error
  // fails the whole call; an error reply fails only its own entry.
  absl::StatusOr<std::vector<absl::StatusOr<RedisReply>>> Pipeline(
      const std::vector<RedisArgs>& commands);

  // Runs the Lua `script` with `keys` and `args`: EVALSHA of its SHA1 (from SCRIPT LOAD, cached
  // per script text); on NOSCRIPT (a restarted or flushed server) loads it again and retries
  // once. `script` must be a string with static storage (it is the cache key).
  absl::StatusOr<RedisReply> Eval(absl::string_view script, const std::vector<std::string>& keys,
                                  const RedisArgs& args);

 private:
  // Connects if needed; fails fast inside the backoff window.
  absl::Status EnsureConnectedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The Unavailable status for a transport failure; drops the connection. `what` is a copy
  // (it is often ctx_->errstr, which the drop frees).
  absl::Status TransportErrorLocked(std::string what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<RedisReply> CommandLocked(const RedisArgs& args)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReplyError(absl::string_view text) const;

  const RedisAddress address_;
  const std::string password_;
  absl::Mutex mu_;
  redisContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time last_failed_connect_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Status last_connect_error_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<const char*, std::string> script_sha_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_STORE_REDIS_REDIS_CLIENT_H_
