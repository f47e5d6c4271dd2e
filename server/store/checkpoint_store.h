// Durable checkpoint files in one directory (--checkpoint_dir).
//
// A file is written to "<name>.tmp.<8 hex>", fsync'd, renamed over "<name>", and then the
// directory is fsync'd, so a crash leaves either the old file, the new one, or no file: never a
// torn one. A crash between create and rename leaves the temporary file behind;
// RemoveStaleTemporaries (run once at server start) deletes those. Names are built from
// validated hex ids only (ids.h), so they never leave the directory.
//
// Thread-safe: methods touch only the file system. Failures are statuses. Messages of the
// per-request methods (WriteAtomic, Read) reach clients, so they name the file inside the
// directory but never the directory's path: ResourceExhausted when the disk, a quota or the file
// size limit is full (ENOSPC, EDQUOT, EFBIG), NotFound for a missing file, Internal for any other
// I/O error (with the errno text). Open and RemoveStaleTemporaries run once at server start and
// their errors go to the operator's log, never to a client: those messages name the directory.
#ifndef FLATSTATE_SERVER_STORE_CHECKPOINT_STORE_H_
#define FLATSTATE_SERVER_STORE_CHECKPOINT_STORE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flatstate::server {

// The status for a failed file operation `what` ("cannot write") on `file` (a name inside the
// checkpoint directory) with errno `err`; codes as above. Exposed for tests.
absl::Status CheckpointIoError(absl::string_view what, absl::string_view file, int err);

class CheckpointStore {
 public:
  // Creates `dir` (and parents) if missing. FailedPrecondition (naming `dir`) if it cannot be
  // created or is not a directory.
  static absl::StatusOr<CheckpointStore> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }

  // "<dir>/<id>.ckpt" for user checkpoints; "<dir>/<id>.evicted" for idle-evicted sessions.
  std::string CheckpointPath(absl::string_view id) const;
  std::string EvictedPath(absl::string_view session_id) const;

  // True iff `name` (a file name, no directory) is one WriteAtomic creates before its rename:
  // "<32 hex>.ckpt.tmp.<8 hex>" or "<32 hex>.evicted.tmp.<8 hex>".
  static bool IsTemporaryName(absl::string_view name);

  // `path` must be CheckpointPath(...) or EvictedPath(...). The rename is the commit point:
  // - a failure before it removes the temporary file and leaves `path` untouched (an earlier
  //   file of that name survives);
  // - a failure after it (the directory cannot be opened or fsync'd) returns an error although
  //   `path` already holds the new bytes, complete and fsync'd; only the rename may not survive
  //   a crash. The message says so ("renamed into place"). Callers treat the write as failed.
  absl::Status WriteAtomic(const std::string& path, absl::string_view bytes) const;
  absl::StatusOr<std::string> Read(const std::string& path, absl::string_view what) const;
  void Remove(const std::string& path) const;

  // Deletes every regular file in the directory whose name IsTemporaryName (what a process
  // killed mid-write leaves behind) and nothing else; returns how many it removed. Internal
  // (naming the directory) if it cannot be listed or such a file cannot be removed (the others
  // are still tried).
  // Meant for server start: a server sharing the directory and writing at that very moment
  // would see that one write fail with an error (never a lost acknowledged checkpoint).
  absl::StatusOr<int> RemoveStaleTemporaries() const;

 private:
  explicit CheckpointStore(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_STORE_CHECKPOINT_STORE_H_
