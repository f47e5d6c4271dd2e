// Durable checkpoint files in one directory (--checkpoint_dir).
//
// A file is written to "<name>.tmp.<random>", fsync'd, renamed over "<name>", and then the
// directory is fsync'd, so a crash leaves either the old file, the new one, or no file: never a
// torn one. Names are built from validated hex ids only (ids.h), so they never leave the
// directory. Thread-safe: methods touch only the file system. Failures are statuses:
// Internal/Unavailable for I/O errors (with errno text), NotFound for a missing file.
#ifndef FLATSTATE_SERVER_CHECKPOINT_STORE_H_
#define FLATSTATE_SERVER_CHECKPOINT_STORE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flatstate::server {

class CheckpointStore {
 public:
  // Creates `dir` (and parents) if missing.
  static absl::StatusOr<CheckpointStore> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }

  // "<dir>/<id>.ckpt" for user checkpoints; "<dir>/<id>.evicted" for idle-evicted sessions.
  std::string CheckpointPath(absl::string_view id) const;
  std::string EvictedPath(absl::string_view session_id) const;

  absl::Status WriteAtomic(const std::string& path, absl::string_view bytes) const;
  absl::StatusOr<std::string> Read(const std::string& path, absl::string_view what) const;
  void Remove(const std::string& path) const;

 private:
  explicit CheckpointStore(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_CHECKPOINT_STORE_H_
