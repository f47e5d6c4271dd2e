// RedisSessionStore: the shared session store (--session_store=redis://HOST:PORT[/DB]); the
// contract is SessionStore's (session_store.h), this file says how Redis keeps it.
//
// Key layout (<p> = key prefix, "flatstate" by default). Every key of one session or checkpoint
// carries its id in braces, a Redis Cluster hash tag, so all of them live in one slot and the
// Lua scripts below touch one slot only:
//   <p>:{<sid>}:ver                 the version (fencing counter): an integer, INCR'd by each
//                                   committed Save; the first Save makes it 1.
//   <p>:{<sid>}:head                the head bytes, framed (redis_session_format.h) with
//                                   chunk_tokens, total_chunks and one 16-hex nonce per chunk.
//   <p>:{<sid>}:kv:<c>:<nonce>      chunk c (softmax KV rows), framed with its index and a CRC.
//                                   IMMUTABLE: each write of a chunk gets a fresh random nonce,
//                                   so a refused (stale) writer never overwrites a chunk that a
//                                   committed head references.
//   <p>:{<sid>}:lease               "<replica id>|<random token>" while a replica holds the
//                                   session (set when free or left by this same replica id,
//                                   PX lease time; see SessionStore::AcquireLease).
//   <p>:{<cid>}:ckpt                a named checkpoint's manifest (size, part count, per-part
//   <p>:{<cid>}:ckpt:<i>            size and CRC) and its parts, raw, at most
//                                   checkpoint_part_bytes each (8 MiB). NO TTL: checkpoints are
//                                   the user's and the server never removes them.
// Session keys (ver, head, chunks) expire after session_ttl; every committed Save and every
// AcquireLease refreshes the TTL of all of them together.
//
// Save(sid, E, image): (1) when image keeps chunks (first_new_chunk > 0) read head+ver in one
// script to learn the nonces of the kept chunks (Aborted at once if ver != E); (2) SET PX the new
// chunks under fresh nonce keys in one pipeline; (3) one Lua script, atomically: check ver == E,
// check every chunk key of the new head exists, delete the chunk keys of the old head that the
// new one no longer names, SET the head, INCR ver, PEXPIRE every key. Refused (ver != E): the
// chunks of (2) are deleted (best effort; else they expire) and the result is Aborted "stored
// version is V, this write expected E". A transport error during (3) leaves the chunks of (2) to
// their TTL (the commit may have happened).
// Load: head+ver in one script, then every chunk in one pipeline. A chunk key that is gone means
// a concurrent Save replaced it: Load starts over (load_attempts times, then Aborted); if the
// version did not move, the chunk is really lost: DataLoss naming its key.
// The scripts name chunk keys they read from the head (server-side, same hash tag, so the same
// slot); Redis accepts that on a single server and for same-slot keys in a cluster.
//
// Owns one RedisClient (one connection; redis_client.h). Thread-safe: calls are serialised on
// the connection. Failures as session_store.h lists them; Unavailable names the address and
// fails fast while the server is down (redis_client.h); FailedPrecondition also when the server
// refuses the password. PutEvicted/GetEvicted/RemoveEvicted answer Unimplemented (a shared store
// is written through every turn; eviction only drops the in-memory copy).
#ifndef FLATSTATE_SERVER_STORE_REDIS_REDIS_SESSION_STORE_H_
#define FLATSTATE_SERVER_STORE_REDIS_REDIS_SESSION_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/store/redis/redis_client.h"
#include "server/store/redis/redis_session_format.h"
#include "server/store/session_store.h"

namespace flatstate::server {

struct RedisSessionStoreOptions {
  RedisAddress address;
  std::string password;  // empty: no AUTH
  std::string key_prefix = "flatstate";
  absl::Duration session_ttl = absl::Hours(24);  // --session_ttl
  absl::Duration lease = absl::Seconds(5);       // --session_lease
  std::string replica_id;                        // goes into lease values and Aborted messages
  uint64_t checkpoint_part_bytes = uint64_t{8} << 20;
  int load_attempts = 3;
};

class RedisSessionStore final : public SessionStore {
 public:
  explicit RedisSessionStore(RedisSessionStoreOptions options);

  // Connects (if needed) and PINGs: statuses of RedisClient.
  absl::Status Ping() { return client_.Ping(); }
  const RedisSessionStoreOptions& options() const { return options_; }

  bool shared() const override { return true; }
  std::string address() const override { return options_.address.ToString(); }

  absl::StatusOr<SessionLease> AcquireLease(absl::string_view session_id) override;
  absl::Status RenewLease(const SessionLease& lease) override;
  void ReleaseLease(const SessionLease& lease) override;
  absl::StatusOr<uint64_t> Version(absl::string_view session_id) override;
  absl::StatusOr<StoredSession> Load(absl::string_view session_id) override;
  absl::StatusOr<uint64_t> Save(absl::string_view session_id, uint64_t expected_version,
                                const SessionImage& image) override;
  absl::Status Delete(absl::string_view session_id) override;

  absl::Status PutEvicted(absl::string_view session_id, absl::string_view blob) override;
  absl::StatusOr<std::string> GetEvicted(absl::string_view session_id) const override;
  void RemoveEvicted(absl::string_view session_id) override;
  absl::Status PutCheckpoint(absl::string_view checkpoint_id, absl::string_view blob) override;
  absl::StatusOr<std::string> GetCheckpoint(absl::string_view checkpoint_id) const override;

 private:
  struct HeadRead {
    bool exists = false;
    uint64_t version = 0;
    DecodedHead head;
  };
  // ver and head in one script.
  absl::StatusOr<HeadRead> ReadHead(absl::string_view sid) const;
  absl::StatusOr<std::vector<std::string>> WriteChunks(absl::string_view sid,
                                                       const SessionImage& image,
                                                       const std::vector<std::string>& nonces);
  void DeleteKeys(const std::vector<std::string>& keys);
  std::string TtlMs() const;

  const RedisSessionStoreOptions options_;
  const RedisKeys keys_;
  mutable RedisClient client_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_STORE_REDIS_REDIS_SESSION_STORE_H_
