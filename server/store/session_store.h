// SessionStore: where sessions live outside the process. One interface, two implementations:
//
// - DirSessionStore (--session_store=dir:PATH, the default; not shared): sessions live in this
//   process. The store holds only the blobs of idle sessions the SessionTable evicted (by session
//   id) and the named checkpoints of CheckpointSession (by checkpoint id). No leases, no versions,
//   no write-through: the shared-store methods answer Unimplemented.
// - RedisSessionStore (--session_store=redis://HOST:PORT[/DB], redis_session_store.h; shared):
//   the store is the source of truth that every replica reads and writes. Each turn leases the
//   session (AcquireLease / RenewLease / ReleaseLease), checks the stored version (Version) and
//   reloads when another replica advanced it (Load), and ends with a fenced write (Save). Named
//   checkpoints live in the same store. The evicted-blob methods answer Unimplemented: a shared
//   store is written through at every turn, so eviction only drops the in-memory copy.
//
// Thread-safety: implementations are safe to call from any thread (the engine loop drives the
// sessions; transport threads read named checkpoints).
//
// Failures are statuses that may reach clients, each naming the session or checkpoint id:
//   NotFound           no such session / checkpoint / evicted blob in the store;
//   Aborted            (AcquireLease) another replica holds the lease; the message names its
//                      replica id; retryable. (Save) the stored version is not the expected one:
//                      another replica advanced the session; nothing was written;
//   FailedPrecondition (RenewLease) the lease expired or is held by someone else now;
//   DataLoss           a stored value is corrupt or truncated (its checksum or framing fails);
//   Unavailable        the store cannot be reached (the message names its address);
//   ResourceExhausted  the store is full (disk, quota, Redis maxmemory);
//   InvalidArgument    an id that is not 32 lower-case hex characters (ids.h);
//   Internal           anything else.
// A failed write leaves whatever the store held before it readable, unchanged.
#ifndef FLATSTATE_SERVER_STORE_SESSION_STORE_H_
#define FLATSTATE_SERVER_STORE_SESSION_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/store/checkpoint_store.h"

namespace flatstate::server {

// What a turn writes of one session (SessionTable builds it with the engine's checkpoint split,
// engine/session/checkpoint.h). The store treats the bytes as opaque.
//   Linear kinds: `head` is the whole checkpoint blob; chunk_tokens == total_chunks == 0.
//   Softmax: `head` is the checkpoint up to its KV payload (SerializeSessionHead); the payload is
//   split into chunks of `chunk_tokens` tokens: chunk c holds the KV rows of tokens
//   [c * chunk_tokens, min((c + 1) * chunk_tokens, position)). Only chunks
//   [first_new_chunk, total_chunks) are in `new_chunks` (in order); chunks below first_new_chunk
//   are unchanged since the version this write replaces, and the store keeps its copies of them.
//   A first write of a session has first_new_chunk == 0.
struct SessionImage {
  std::string head;
  int64_t chunk_tokens = 0;
  int64_t total_chunks = 0;
  int64_t first_new_chunk = 0;
  std::vector<std::string> new_chunks;
};

// What Load returns: the head and every chunk (total_chunks of them, in order) of one version.
struct StoredSession {
  uint64_t version = 0;
  std::string head;
  int64_t chunk_tokens = 0;
  std::vector<std::string> chunks;
};

// A lease held on one session by this replica. `token` identifies this holding (the value stored
// under the lease key); Renew/Release act only while the stored value is still `token`.
struct SessionLease {
  std::string session_id;
  std::string token;
};

class SessionStore {
 public:
  virtual ~SessionStore() = default;

  // True for a store that replicas share (leases, versions, write-through; see above).
  virtual bool shared() const = 0;
  // Where the store is, for messages and logs ("dir:/var/lib/...", "redis://10.0.0.5:6379/0").
  virtual std::string address() const = 0;

  // ---- shared stores ----
  // Takes the lease of `session_id` for the store's lease time (SET NX PX). Aborted naming the
  // holder's replica id when another replica holds it. A lease left by this same replica id is
  // taken over: the engine loop runs one turn per session at a time and asks for the lease only
  // when none runs here, so such a lease is stale (a release whose reply was lost while the store
  // restarted, or an earlier process with this id that died). Replica ids must be unique.
  virtual absl::StatusOr<SessionLease> AcquireLease(absl::string_view session_id) = 0;
  // Extends `lease` by the lease time. FailedPrecondition when it is no longer ours.
  virtual absl::Status RenewLease(const SessionLease& lease) = 0;
  // Drops `lease` if it is still ours; best effort (an unreleased lease expires on its own).
  virtual void ReleaseLease(const SessionLease& lease) = 0;
  // The stored version of `session_id` (>= 1): one small read. NotFound when the store has none.
  virtual absl::StatusOr<uint64_t> Version(absl::string_view session_id) = 0;
  // The latest stored version, read consistently (never a head of one version with chunks of
  // another). NotFound, DataLoss (naming the corrupt key), Unavailable.
  virtual absl::StatusOr<StoredSession> Load(absl::string_view session_id) = 0;
  // Writes `image` as version expected_version + 1 if and only if the stored version is
  // `expected_version` (0: the session must not exist yet), checked atomically in the store
  // (the fencing check). Returns the new version. Aborted when the stored version differs
  // (nothing becomes visible; chunks already sent are cleaned up or expire). Refreshes the TTL of
  // every key of the session.
  virtual absl::StatusOr<uint64_t> Save(absl::string_view session_id, uint64_t expected_version,
                                        const SessionImage& image) = 0;
  // Removes every key of the session (state, chunks, version, lease). NotFound when none.
  virtual absl::Status Delete(absl::string_view session_id) = 0;

  // ---- non-shared stores: the checkpoint blob of an evicted session ----
  virtual absl::Status PutEvicted(absl::string_view session_id, absl::string_view blob) = 0;
  virtual absl::StatusOr<std::string> GetEvicted(absl::string_view session_id) const = 0;
  // Best effort: a blob that cannot be removed is left behind, never an error.
  virtual void RemoveEvicted(absl::string_view session_id) = 0;

  // ---- every store: named checkpoints (CheckpointSession / RestoreSession by checkpoint_id);
  // never removed by the server.
  virtual absl::Status PutCheckpoint(absl::string_view checkpoint_id, absl::string_view blob) = 0;
  virtual absl::StatusOr<std::string> GetCheckpoint(absl::string_view checkpoint_id) const = 0;
};

// Files in one directory through CheckpointStore: "<dir>/<session_id>.evicted" and
// "<dir>/<checkpoint_id>.ckpt", written atomically (see checkpoint_store.h). Ids must be ids
// from server/store/ids.h (32 lower-case hex characters): anything else is InvalidArgument, so no
// id names a path outside the directory. Not shared: the shared-store methods answer Unimplemented.
class DirSessionStore final : public SessionStore {
 public:
  explicit DirSessionStore(CheckpointStore files) : files_(std::move(files)) {}

  bool shared() const override { return false; }
  std::string address() const override { return "dir:" + files_.dir(); }

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

  const CheckpointStore& files() const { return files_; }

 private:
  const CheckpointStore files_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_STORE_SESSION_STORE_H_
