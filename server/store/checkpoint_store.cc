#include "server/store/checkpoint_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "server/store/ids.h"

namespace flatstate::server {
namespace {

constexpr absl::string_view kTmpInfix = ".tmp.";
constexpr size_t kTmpSuffixHexChars = 8;

// The last path component (the name inside the directory).
absl::string_view BaseName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// CheckpointIoError's codes. `committed`: the failure came after the rename (WriteAtomic's commit
// point), so the new file is in place; the message says so instead of "nothing was saved".
absl::Status IoError(absl::string_view what, absl::string_view file, int err, bool committed) {
  const std::string msg =
      absl::StrCat("checkpoint_dir: ", what, " ", file, ": ", std::strerror(err));
  constexpr absl::string_view kCommitted =
      "the file was renamed into place but may not survive a crash";
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::ResourceExhaustedError(absl::StrCat(
          msg,
          " (the checkpoint directory's file system is full, over its quota or over the "
          "file size limit; ",
          committed ? kCommitted : "nothing was saved", ")"));
    default:
      return absl::InternalError(committed ? absl::StrCat(msg, " (", kCommitted, ")") : msg);
  }
}

}  // namespace

absl::Status CheckpointIoError(absl::string_view what, absl::string_view file, int err) {
  return IoError(what, file, err, /*committed=*/false);
}

absl::StatusOr<CheckpointStore> CheckpointStore::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint_dir ", dir, " cannot be created: ", ec.message()));
  }
  return CheckpointStore(dir);
}

std::string CheckpointStore::CheckpointPath(absl::string_view id) const {
  return absl::StrCat(dir_, "/", id, ".ckpt");
}

std::string CheckpointStore::EvictedPath(absl::string_view session_id) const {
  return absl::StrCat(dir_, "/", session_id, ".evicted");
}

bool CheckpointStore::IsTemporaryName(absl::string_view name) {
  if (name.size() < kIdHexChars || !IsValidId(name.substr(0, kIdHexChars))) return false;
  absl::string_view rest = name.substr(kIdHexChars);
  if (!absl::ConsumePrefix(&rest, ".ckpt") && !absl::ConsumePrefix(&rest, ".evicted")) {
    return false;
  }
  if (!absl::ConsumePrefix(&rest, kTmpInfix)) return false;
  return rest.size() == kTmpSuffixHexChars && IsLowerHex(rest);
}

absl::Status CheckpointStore::WriteAtomic(const std::string& path, absl::string_view bytes) const {
  const std::string tmp = absl::StrCat(path, kTmpInfix, NewId().substr(0, kTmpSuffixHexChars));
  const absl::string_view tmp_name = BaseName(tmp);
  // Every failure after the create removes the temporary file (errno is read first).
  auto fail = [&](absl::string_view what, absl::string_view file, int err) {
    absl::Status s = CheckpointIoError(what, file, err);
    ::unlink(tmp.c_str());
    return s;
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return CheckpointIoError("cannot create", tmp_name, errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = fail("cannot write", tmp_name, errno);
      ::close(fd);
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    absl::Status s = fail("cannot fsync", tmp_name, errno);
    ::close(fd);
    return s;
  }
  if (::close(fd) != 0) return fail("cannot close", tmp_name, errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    return fail(absl::StrCat("cannot rename ", tmp_name, " to"), BaseName(path), err);
  }
  // Past the commit point: `path` holds the new bytes; only the rename's durability is at stake.
  int dfd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return IoError("cannot open", "the directory", errno, /*committed=*/true);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) return IoError("cannot fsync", "the directory", err, /*committed=*/true);
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointStore::Read(const std::string& path,
                                                  absl::string_view what) const {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(what, " not found"));
    return CheckpointIoError("cannot open", BaseName(path), errno);
  }
  std::string out;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      absl::Status s = CheckpointIoError("cannot read", BaseName(path), errno);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

void CheckpointStore::Remove(const std::string& path) const { ::unlink(path.c_str()); }

absl::StatusOr<int> CheckpointStore::RemoveStaleTemporaries() const {
  std::error_code ec;
  std::filesystem::directory_iterator it(dir_, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("checkpoint_dir ", dir_, " cannot be listed: ", ec.message()));
  }
  int removed = 0;
  absl::Status first_error;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!IsTemporaryName(name)) continue;
    // Never follow a link or descend into a directory of that name.
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    if (::unlink(it->path().c_str()) == 0) {
      ++removed;
    } else if (first_error.ok()) {
      first_error = absl::InternalError(absl::StrCat("checkpoint_dir ", dir_, ": cannot remove ",
                                                     name, ": ", std::strerror(errno)));
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("checkpoint_dir ", dir_, " cannot be listed: ", ec.message()));
  }
  if (!first_error.ok()) return first_error;
  return removed;
}

}  // namespace flatstate::server
