// Unit tests of server/checkpoint_store: the codes of file errors, which messages may name the
// directory (startup errors, for the operator's log) and which may not (per-request errors, which
// reach clients), and what a failed WriteAtomic leaves on disk.
#include "server/store/checkpoint_store.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "server/store/ids.h"
#include "tests/util/model_writer.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The names in `dir`, sorted.
std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// The status codes and messages of file errors (they reach clients: no server paths).
TEST(CheckpointStoreTest, FullDiskErrnosAreResourceExhaustedAndMessagesHaveNoPath) {
  const std::string file = "0123456789abcdef0123456789abcdef.ckpt.tmp.0123abcd";
  for (int err : {ENOSPC, EDQUOT, EFBIG}) {
    const absl::Status s = server::CheckpointIoError("cannot write", file, err);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), file)) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), std::strerror(err))) << s;
    EXPECT_FALSE(absl::StrContains(s.message(), "/")) << s;
  }
  for (int err : {EACCES, EIO, ENOTDIR, ENOENT, EROFS}) {
    const absl::Status s = server::CheckpointIoError("cannot create", file, err);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), std::strerror(err))) << s;
  }
}

TEST(CheckpointStoreTest, TemporaryNamesAreExactlyWhatWriteAtomicCreates) {
  const std::string id = server::NewId();
  EXPECT_TRUE(server::CheckpointStore::IsTemporaryName(id + ".ckpt.tmp.0123abcd"));
  EXPECT_TRUE(server::CheckpointStore::IsTemporaryName(id + ".evicted.tmp.ffffffff"));
  for (const std::string& name :
       {id + ".ckpt", id + ".evicted", id + ".ckpt.tmp.", id + ".ckpt.tmp.0123abc",
        id + ".ckpt.tmp.0123abcde", id + ".ckpt.tmp.0123ABCD", id + ".ckpt.tmp.0123abcd.bak",
        id + ".other.tmp.0123abcd", id.substr(1) + ".ckpt.tmp.0123abcd",
        std::string("notes.tmp.01234567"), std::string("../") + id + ".ckpt.tmp.0123abcd"}) {
    EXPECT_FALSE(server::CheckpointStore::IsTemporaryName(name)) << name;
  }
  // A failed write leaves no temporary file; a good one leaves only the final file.
  auto store = server::CheckpointStore::Open(TempDir() + "/store");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(store->WriteAtomic(store->CheckpointPath(id), "bytes").ok());
  const absl::Status bad = store->WriteAtomic(store->dir() + "/missing/x.ckpt", "bytes");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInternal) << bad;
  EXPECT_FALSE(absl::StrContains(bad.message(), store->dir())) << bad;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(store->dir())) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_EQ(names, std::vector<std::string>{id + ".ckpt"});
}

// Open and RemoveStaleTemporaries run at server start; their errors go to the operator's log and
// name the directory.
TEST(CheckpointStoreTest, StartupErrorsNameTheDirectory) {
  const std::string file = TempDir() + "/a_regular_file";
  std::ofstream(file) << "x";
  const std::string under_file = file + "/ckpt";
  absl::StatusOr<server::CheckpointStore> bad = server::CheckpointStore::Open(under_file);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), under_file)) << bad.status();

  const std::string dir = TempDir() + "/gone";
  absl::StatusOr<server::CheckpointStore> store = server::CheckpointStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  fs::remove_all(dir);
  absl::StatusOr<int> removed = store->RemoveStaleTemporaries();
  EXPECT_EQ(removed.status().code(), absl::StatusCode::kInternal) << removed.status();
  EXPECT_TRUE(absl::StrContains(removed.status().message(), dir)) << removed.status();
}

// Read's errors reach clients: no directory in them.
TEST(CheckpointStoreTest, ReadErrorsDoNotNameTheDirectory) {
  absl::StatusOr<server::CheckpointStore> store =
      server::CheckpointStore::Open(TempDir() + "/read");
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string id = server::NewId();
  absl::StatusOr<std::string> missing = store->Read(store->CheckpointPath(id), "checkpoint");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  EXPECT_FALSE(absl::StrContains(missing.status().message(), store->dir())) << missing.status();
  // A directory where the file should be: open succeeds, read fails (EISDIR).
  fs::create_directory(store->CheckpointPath(id));
  absl::StatusOr<std::string> dir = store->Read(store->CheckpointPath(id), "checkpoint");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInternal) << dir.status();
  EXPECT_FALSE(absl::StrContains(dir.status().message(), store->dir())) << dir.status();
}

// A write that fails before the rename (here: over the file size limit, EFBIG) leaves the earlier
// file of that name as it was and no temporary file.
TEST(CheckpointStoreTest, FailureBeforeTheRenameLeavesTheEarlierFile) {
  absl::StatusOr<server::CheckpointStore> store =
      server::CheckpointStore::Open(TempDir() + "/before");
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string path = store->EvictedPath(server::NewId());
  ASSERT_TRUE(store->WriteAtomic(path, "old bytes").ok());

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, SIG_IGN);  // so the write that crosses the limit fails with EFBIG
  rlimit small = saved;
  small.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0) << std::strerror(errno);
  const absl::Status s = store->WriteAtomic(path, std::string(4096, 'n'));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  signal(SIGXFSZ, SIG_DFL);

  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "nothing was saved")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), store->dir())) << s;
  EXPECT_EQ(ReadBytes(path), "old bytes");
  EXPECT_EQ(Names(store->dir()), std::vector<std::string>{fs::path(path).filename().string()});
}

// A failure after the rename (the directory cannot be opened for its fsync: mode 0300 lets a
// process create and rename files in it but not open it for reading) is an error that says the
// new file is in place, and it is. Permission bits do not bind root, so this needs another user.
TEST(CheckpointStoreTest, FailureAfterTheRenameSaysTheNewFileIsInPlace) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  absl::StatusOr<server::CheckpointStore> store =
      server::CheckpointStore::Open(TempDir() + "/after");
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string path = store->CheckpointPath(server::NewId());
  ASSERT_TRUE(store->WriteAtomic(path, "old bytes").ok());
  ASSERT_EQ(chmod(store->dir().c_str(), 0300), 0) << std::strerror(errno);
  const absl::Status s = store->WriteAtomic(path, "new bytes");
  ASSERT_EQ(chmod(store->dir().c_str(), 0700), 0) << std::strerror(errno);

  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "renamed into place")) << s;
  EXPECT_FALSE(absl::StrContains(s.message(), store->dir())) << s;
  EXPECT_EQ(ReadBytes(path), "new bytes");
  EXPECT_EQ(Names(store->dir()), std::vector<std::string>{fs::path(path).filename().string()});
}

}  // namespace
}  // namespace flatstate::testing
