// SessionStore: where session checkpoints live outside the process: the blobs of idle sessions
// the SessionTable evicted (by session id) and the named checkpoints of CheckpointSession (by
// checkpoint id). An interface so that a shared store (Redis, ...) can replace the local
// directory; DirSessionStore is the --checkpoint_dir implementation.
//
// Thread-safety: implementations must be safe to call from any thread (the engine loop writes
// and reads evicted sessions; transport threads read named checkpoints). Failures are statuses
// that may reach clients: NotFound for a missing blob, ResourceExhausted when the store is full,
// Internal otherwise; a failed Put leaves any earlier blob of that id as it was.
#ifndef FLATSTATE_SERVER_SESSION_STORE_H_
#define FLATSTATE_SERVER_SESSION_STORE_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "server/checkpoint_store.h"

namespace flatstate::server {

class SessionStore {
 public:
  virtual ~SessionStore() = default;

  // The checkpoint blob of an evicted session.
  virtual absl::Status PutEvicted(absl::string_view session_id, absl::string_view blob) = 0;
  virtual absl::StatusOr<std::string> GetEvicted(absl::string_view session_id) const = 0;
  // Best effort: a blob that cannot be removed is left behind, never an error.
  virtual void RemoveEvicted(absl::string_view session_id) = 0;

  // Named checkpoints (CheckpointSession / RestoreSession by checkpoint_id); never removed.
  virtual absl::Status PutCheckpoint(absl::string_view checkpoint_id, absl::string_view blob) = 0;
  virtual absl::StatusOr<std::string> GetCheckpoint(absl::string_view checkpoint_id) const = 0;
};

// Files in one directory through CheckpointStore: "<dir>/<session_id>.evicted" and
// "<dir>/<checkpoint_id>.ckpt", written atomically (see checkpoint_store.h). Ids must be ids
// from server/ids.h (32 lower-case hex characters): anything else is InvalidArgument, so no id
// names a path outside the directory.
class DirSessionStore final : public SessionStore {
 public:
  explicit DirSessionStore(CheckpointStore files) : files_(std::move(files)) {}

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

#endif  // FLATSTATE_SERVER_SESSION_STORE_H_
