#include "server/store/session_store.h"

#include "absl/strings/str_cat.h"
#include "server/store/ids.h"

namespace flatstate::server {
namespace {

absl::Status CheckId(absl::string_view id, absl::string_view what) {
  if (IsValidId(id)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": '", id, "' is not an id (32 lower-case hex characters)"));
}

absl::Status NotShared(absl::string_view what) {
  return absl::UnimplementedError(absl::StrCat(
      what, ": the directory session store is not shared (use --session_store=redis://...)"));
}

}  // namespace

absl::StatusOr<SessionLease> DirSessionStore::AcquireLease(absl::string_view) {
  return NotShared("AcquireLease");
}
absl::Status DirSessionStore::RenewLease(const SessionLease&) { return NotShared("RenewLease"); }
void DirSessionStore::ReleaseLease(const SessionLease&) {}
absl::StatusOr<uint64_t> DirSessionStore::Version(absl::string_view) {
  return NotShared("Version");
}
absl::StatusOr<StoredSession> DirSessionStore::Load(absl::string_view) { return NotShared("Load"); }
absl::StatusOr<uint64_t> DirSessionStore::Save(absl::string_view, uint64_t, const SessionImage&) {
  return NotShared("Save");
}
absl::Status DirSessionStore::Delete(absl::string_view) { return NotShared("Delete"); }

absl::Status DirSessionStore::PutEvicted(absl::string_view session_id, absl::string_view blob) {
  if (absl::Status s = CheckId(session_id, "session_id"); !s.ok()) return s;
  return files_.WriteAtomic(files_.EvictedPath(session_id), blob);
}

absl::StatusOr<std::string> DirSessionStore::GetEvicted(absl::string_view session_id) const {
  if (absl::Status s = CheckId(session_id, "session_id"); !s.ok()) return s;
  return files_.Read(files_.EvictedPath(session_id),
                     absl::StrCat("evicted state of session ", session_id));
}

void DirSessionStore::RemoveEvicted(absl::string_view session_id) {
  if (CheckId(session_id, "session_id").ok()) files_.Remove(files_.EvictedPath(session_id));
}

absl::Status DirSessionStore::PutCheckpoint(absl::string_view checkpoint_id,
                                            absl::string_view blob) {
  if (absl::Status s = CheckId(checkpoint_id, "checkpoint_id"); !s.ok()) return s;
  return files_.WriteAtomic(files_.CheckpointPath(checkpoint_id), blob);
}

absl::StatusOr<std::string> DirSessionStore::GetCheckpoint(absl::string_view checkpoint_id) const {
  if (absl::Status s = CheckId(checkpoint_id, "checkpoint_id"); !s.ok()) return s;
  return files_.Read(files_.CheckpointPath(checkpoint_id),
                     absl::StrCat("checkpoint_id: checkpoint ", checkpoint_id));
}

}  // namespace flatstate::server
