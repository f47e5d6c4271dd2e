// Security: session and checkpoint ids are 128 random bits, and no id, however hostile, names a
// path outside --checkpoint_dir (nothing there is read, created, changed or removed).
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "server/store/ids.h"
#include "tests/system/security_test_util.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;
using Code = grpc::StatusCode;

pb::Checkpoint Checkpoint(pb::Inference::Stub* stub, const std::string& session_id,
                          const std::string& auth = "") {
  pb::CheckpointSessionRequest req;
  req.set_session_id(session_id);
  pb::Checkpoint ck;
  grpc::ClientContext ctx;
  SetAuth(&ctx, auth);
  grpc::Status st = stub->CheckpointSession(&ctx, req, &ck);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return ck;
}

// 32 lower-case hex characters, all different, every bit position balanced, no two consecutive
// ids sharing a prefix or a constant difference (a counter or a time stamp would).
void ExpectRandomIds(const std::vector<std::string>& ids) {
  std::set<std::string> unique(ids.begin(), ids.end());
  EXPECT_EQ(unique.size(), ids.size());
  std::vector<int> ones(128, 0);
  std::set<uint64_t> deltas;
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSERT_TRUE(server::IsValidId(ids[i])) << ids[i];
    for (int c = 0; c < 32; ++c) {
      const int nibble = std::stoi(ids[i].substr(c, 1), nullptr, 16);
      for (int b = 0; b < 4; ++b) ones[4 * c + b] += (nibble >> b) & 1;
    }
    if (i > 0) {
      size_t common = 0;
      while (common < 32 && ids[i][common] == ids[i - 1][common]) ++common;
      EXPECT_LT(common, 8u) << ids[i - 1] << " then " << ids[i];
      deltas.insert(std::stoull(ids[i].substr(16), nullptr, 16) -
                    std::stoull(ids[i - 1].substr(16), nullptr, 16));
    }
  }
  EXPECT_GT(deltas.size(), ids.size() * 9 / 10);
  // Binomial(n, 1/2): 35%..65% is more than 9 standard deviations out for n = 1000.
  for (int b = 0; b < 128; ++b) {
    EXPECT_GT(ones[b], static_cast<int>(ids.size()) * 35 / 100) << "bit " << b;
    EXPECT_LT(ones[b], static_cast<int>(ids.size()) * 65 / 100) << "bit " << b;
  }
}

TEST(SecurityTest, SessionAndCheckpointIdsAre128RandomBits) {
  server::ServerOptions o = TestOptions();
  o.max_sessions = 2000;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  std::vector<std::string> sessions;
  for (int i = 0; i < 1000; ++i) sessions.push_back(NewSession(stub.get()).session_id());
  ExpectRandomIds(sessions);
  std::vector<std::string> checkpoints;
  for (int i = 0; i < 1000; ++i) checkpoints.push_back(server::NewId());
  for (int i = 0; i < 50; ++i) {
    const pb::Checkpoint ck = Checkpoint(stub.get(), sessions[i]);
    checkpoints[i] = ck.checkpoint_id();
    EXPECT_TRUE(fs::exists(o.checkpoint_dir + "/" + ck.checkpoint_id() + ".ckpt"));
  }
  ExpectRandomIds(checkpoints);
  std::set<std::string> all(sessions.begin(), sessions.end());
  all.insert(checkpoints.begin(), checkpoints.end());
  EXPECT_EQ(all.size(), 2000u);
}

// Size and modification time of every file under `root` except those under `skip`.
std::map<std::string, std::pair<uintmax_t, int64_t>> Snapshot(const std::string& root,
                                                             const std::string& skip) {
  std::map<std::string, std::pair<uintmax_t, int64_t>> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string p = e.path().string();
    if (p.rfind(skip, 0) == 0) continue;
    struct stat st {};
    ::stat(p.c_str(), &st);
    out[p] = {static_cast<uintmax_t>(st.st_size),
              static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  }
  return out;
}

TEST(SecurityTest, CheckpointIdsCannotEscapeTheCheckpointDir) {
  const std::string base = TempDir();
  server::ServerOptions o = TestOptions();
  o.checkpoint_dir = base + "/ckpt";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  const pb::Session s = NewSession(stub.get());
  pb::GenerateRequest gen = GenRequest("", "secret context", 2);
  gen.set_session_id(s.session_id());
  ASSERT_TRUE(RunGenerate(stub.get(), gen).status.ok());
  const pb::Checkpoint ck = Checkpoint(stub.get(), s.session_id());
  // Valid checkpoints planted outside the directory, under names a traversal would reach.
  const std::string outside_id = server::NewId();
  for (const std::string& name : {outside_id + ".ckpt", std::string("x.ckpt"), std::string("x")}) {
    std::ofstream(base + "/" + name, std::ios::binary) << ck.data();
  }
  fs::create_directories(base + "/a");
  std::ofstream(base + "/a/b.ckpt", std::ios::binary) << ck.data();
  const auto before = Snapshot(base, o.checkpoint_dir);
  struct stat passwd_before {};
  ::stat("/etc/passwd", &passwd_before);

  std::string nul_inside = ck.checkpoint_id();
  nul_inside[16] = '\0';
  std::string upper = ck.checkpoint_id();
  for (char& c : upper) c = absl::ascii_toupper(c);
  const std::vector<std::string> hostile = {
      "../" + outside_id,
      "../x",
      "..",
      ".",
      "",
      "/etc/passwd",
      "a/b",
      "../a/b",
      "../../../../../../../etc/passwd",
      std::string(10, '/') + "../../../../etc/passwd",  // 32 characters
      upper,
      ck.checkpoint_id() + "0",
      ck.checkpoint_id().substr(0, 31),
      ck.checkpoint_id() + std::string(1, '\0'),
      nul_inside,
      std::string(32, '\0'),
      ck.checkpoint_id().substr(0, 30) + "/.",
      ck.checkpoint_id().substr(0, 31) + "g",
      std::string(4096, 'a'),
      "%2e%2e%2fx",
      "\xc3\xa9" + ck.checkpoint_id().substr(2),
  };
  for (const std::string& id : hostile) {
    pb::RestoreSessionRequest req;
    req.set_checkpoint_id(id);
    pb::Session out;
    grpc::ClientContext ctx;
    const grpc::Status st = stub->RestoreSession(&ctx, req, &out);
    EXPECT_TRUE(st.error_code() == Code::INVALID_ARGUMENT || st.error_code() == Code::NOT_FOUND)
        << "checkpoint_id '" << absl::CEscape(id) << "': " << st.error_code() << " "
        << st.error_message();
    // The same strings as session ids.
    pb::GetSessionRequest get;
    get.set_session_id(id);
    grpc::ClientContext gctx;
    const Code gc = stub->GetSession(&gctx, get, &out).error_code();
    EXPECT_TRUE(gc == Code::NOT_FOUND || gc == Code::INVALID_ARGUMENT) << absl::CEscape(id);
    pb::CheckpointSessionRequest cks;
    cks.set_session_id(id);
    pb::Checkpoint ignored;
    grpc::ClientContext cctx;
    const Code cc = stub->CheckpointSession(&cctx, cks, &ignored).error_code();
    EXPECT_TRUE(cc == Code::NOT_FOUND || cc == Code::INVALID_ARGUMENT) << absl::CEscape(id);
    pb::DeleteSessionRequest del;
    del.set_session_id(id);
    pb::DeleteSessionResponse dresp;
    grpc::ClientContext dctx;
    const Code dc = stub->DeleteSession(&dctx, del, &dresp).error_code();
    EXPECT_TRUE(dc == Code::NOT_FOUND || dc == Code::INVALID_ARGUMENT) << absl::CEscape(id);
    if (id.empty()) continue;  // an empty session_id is a throwaway Generate
    pb::GenerateRequest g = GenRequest("", "x", 1);
    g.set_session_id(id);
    const Code gen_code = RunGenerate(stub.get(), g).status.error_code();
    EXPECT_TRUE(gen_code == Code::NOT_FOUND || gen_code == Code::INVALID_ARGUMENT)
        << absl::CEscape(id) << ": " << gen_code;
  }
  // Nothing outside the directory was read into a session, created, changed or removed.
  EXPECT_EQ(Snapshot(base, o.checkpoint_dir), before);
  struct stat passwd_after {};
  ::stat("/etc/passwd", &passwd_after);
  EXPECT_EQ(passwd_after.st_mtim.tv_sec, passwd_before.st_mtim.tv_sec);
  std::vector<std::string> inside;
  for (const auto& e : fs::directory_iterator(o.checkpoint_dir)) {
    inside.push_back(e.path().filename().string());
  }
  EXPECT_EQ(inside, std::vector<std::string>{ck.checkpoint_id() + ".ckpt"});
  // The legitimate id still works.
  pb::RestoreSessionRequest req;
  req.set_checkpoint_id(ck.checkpoint_id());
  pb::Session out;
  grpc::ClientContext ctx;
  EXPECT_TRUE(stub->RestoreSession(&ctx, req, &out).ok());
}


}  // namespace
}  // namespace flatstate::testing
