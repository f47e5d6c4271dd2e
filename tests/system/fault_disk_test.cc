// Fault injection into --checkpoint_dir: an unwritable directory fails the checkpoint call
// (INTERNAL) and keeps an idle session in memory instead of evicting it; a full one (a file size
// limit) fails it with RESOURCE_EXHAUSTED. The server keeps serving either way.
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "tests/system/fault_test_util.h"
#include "tests/system/server_process.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;

grpc::Status Checkpoint(pb::Inference::Stub* stub, const std::string& session_id) {
  pb::CheckpointSessionRequest req;
  req.set_session_id(session_id);
  pb::Checkpoint ck;
  grpc::ClientContext ctx;
  return stub->CheckpointSession(&ctx, req, &ck);
}

void ExpectServing(pb::Inference::Stub* stub, const std::string& session_id) {
  pb::GenerateRequest cont = GenRequest("", "more", 3);
  cont.set_session_id(session_id);
  StreamResult r = RunGenerate(stub, cont);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens.size(), 3u);
  StreamResult t = RunGenerate(stub, GenRequest(kSoftmax, "throwaway", 3));
  EXPECT_TRUE(t.status.ok()) << t.status.error_message();
}

TEST(FaultTest, UnwritableCheckpointDirFailsTheCallAndServerKeepsServing) {
  server::ServerOptions o = TestOptions();
  o.checkpoint_dir = TempDir() + "/ckpt";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  const std::string sid = CreateSession(stub.get(), kLinear, 1);
  ExpectServing(stub.get(), sid);
  ASSERT_TRUE(Checkpoint(stub.get(), sid).ok());

  // The directory disappears (tests run as root, so a read-only mode would not stop writes).
  fs::remove_all(o.checkpoint_dir);
  grpc::Status st = Checkpoint(stub.get(), sid);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL) << st.error_message();
  EXPECT_FALSE(absl::StrContains(st.error_message(), o.checkpoint_dir)) << st.error_message();
  ExpectServing(stub.get(), sid);

  // A regular file where the directory was.
  WriteBytes(o.checkpoint_dir, "not a directory");
  st = Checkpoint(stub.get(), sid);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INTERNAL) << st.error_message();
  EXPECT_FALSE(absl::StrContains(st.error_message(), o.checkpoint_dir)) << st.error_message();
  ExpectServing(stub.get(), sid);

  // The directory comes back: checkpoints work again.
  fs::remove(o.checkpoint_dir);
  fs::create_directory(o.checkpoint_dir);
  EXPECT_TRUE(Checkpoint(stub.get(), sid).ok());
}

TEST(FaultTest, IdleEvictionIntoUnwritableDirKeepsTheSessionInMemory) {
  server::ServerOptions o = TestOptions();
  o.checkpoint_dir = TempDir() + "/ckpt";
  o.session_idle_ttl = absl::Milliseconds(100);
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  const std::string sid = CreateSession(stub.get(), kLinear, 2);
  pb::GenerateRequest req = GenRequest("", "hello", 4);
  req.set_session_id(sid);
  ASSERT_TRUE(RunGenerate(stub.get(), req).status.ok());
  fs::remove_all(o.checkpoint_dir);
  WriteBytes(o.checkpoint_dir, "not a directory");
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // several eviction attempts
  // GetStats does not touch sessions (GetSession would restore an evicted one).
  pb::ServerStats stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->GetStats(&ctx, pb::GetStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.evicted_sessions(), 0u);
  EXPECT_EQ(stats.active_sessions(), 1u);
  pb::GetSessionRequest get;
  get.set_session_id(sid);
  pb::Session info;
  grpc::ClientContext ctx2;
  ASSERT_TRUE(stub->GetSession(&ctx2, get, &info).ok());
  EXPECT_EQ(info.context_tokens(), 9u);  // "hello" + 4 generated
  ExpectServing(stub.get(), sid);
}

// A full disk, simulated with a file size limit on the server process (RLIMIT_FSIZE; the server
// ignores SIGXFSZ, so the write that crosses the limit fails with EFBIG): the checkpoint that does
// not fit is RESOURCE_EXHAUSTED, leaves no file behind, and everything else keeps working:
// earlier checkpoints restore, sessions generate, checkpoints that fit still succeed.
TEST(FaultTest, FullDiskFailsTheCheckpointWithResourceExhaustedAndServerKeepsServing) {
  const std::string dir = TempDir() + "/ckpt";
  constexpr rlim_t kMaxFileBytes = 64 << 10;
  ServerProcess p(dir, {"--log_requests=false"});
  ASSERT_GT(p.port(), 0);
  // Set on the running server before any request, so every checkpoint write is under it.
  const rlimit lim{kMaxFileBytes, kMaxFileBytes};
  ASSERT_EQ(prlimit(p.pid(), RLIMIT_FSIZE, &lim, nullptr), 0) << std::strerror(errno);

  pb::ListModelsResponse models;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(p.stub()->ListModels(&ctx, pb::ListModelsRequest(), &models).ok());
  }
  uint64_t kv_bytes_per_token = 0;
  for (const auto& m : models.models()) {
    if (m.name() == kSoftmax) kv_bytes_per_token = m.kv_bytes_per_token();
  }
  ASSERT_GT(kv_bytes_per_token, 0u);

  auto checkpoint = [&](const std::string& sid, Acked* out) {
    pb::CheckpointSessionRequest req;
    req.set_session_id(sid);
    pb::Checkpoint c;
    grpc::ClientContext ctx;
    grpc::Status st = p.stub()->CheckpointSession(&ctx, req, &c);
    if (st.ok() && out != nullptr) *out = {c.checkpoint_id(), c.data(), c.context_tokens()};
    return st;
  };
  auto generate = [&](const std::string& sid, const std::string& prompt) {
    pb::GenerateRequest req = GenRequest("", prompt, 3);
    req.set_session_id(sid);
    StreamResult r = RunGenerate(p.stub(), req);
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens.size(), 3u);
  };

  // Checkpoints that fit.
  const std::string linear = CreateSession(p.stub(), kLinear, 5);
  const std::string softmax = CreateSession(p.stub(), kSoftmax, 6);
  generate(linear, "linear");
  generate(softmax, "softmax");
  Acked linear_ck, softmax_ck;
  ASSERT_TRUE(checkpoint(linear, &linear_ck).ok());
  ASSERT_TRUE(checkpoint(softmax, &softmax_ck).ok());
  ASSERT_LT(softmax_ck.data.size(), kMaxFileBytes);

  // The softmax session grows until its checkpoint (KV cache included) is twice the limit.
  generate(softmax, std::string(2 * kMaxFileBytes / kv_bytes_per_token, 'a'));
  Acked too_big;
  const grpc::Status full = checkpoint(softmax, &too_big);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();
  std::printf("[ fault ] %s\n", full.error_message().c_str());
  EXPECT_TRUE(absl::StrContains(full.error_message(), std::strerror(EFBIG)))
      << full.error_message();
  EXPECT_FALSE(absl::StrContains(full.error_message(), dir)) << full.error_message();

  // Nothing partial is left: only the two acknowledged checkpoints are in the directory.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::vector<std::string> want = {linear_ck.checkpoint_id + ".ckpt",
                                   softmax_ck.checkpoint_id + ".ckpt"};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(names, want);

  // The server keeps serving: both sessions continue, a throwaway Generate runs, the earlier
  // checkpoints restore by id exactly like their inline copies, and a checkpoint that fits works.
  generate(softmax, "still here");
  generate(linear, "still here");
  StreamResult t = RunGenerate(p.stub(), GenRequest(kSoftmax, "throwaway", 3));
  EXPECT_TRUE(t.status.ok()) << t.status.error_message();
  for (const Acked* a : {&linear_ck, &softmax_ck}) {
    pb::RestoreSessionRequest by_id, by_data;
    by_id.set_checkpoint_id(a->checkpoint_id);
    by_data.set_data(a->data);
    const std::vector<int32_t> from_file = RestoreAndContinue(p.stub(), by_id, a->context_tokens);
    EXPECT_EQ(from_file.size(), 4u);
    EXPECT_EQ(from_file, RestoreAndContinue(p.stub(), by_data, a->context_tokens));
  }
  Acked again;
  EXPECT_TRUE(checkpoint(linear, &again).ok());
  EXPECT_EQ(ReadBytes(dir + "/" + again.checkpoint_id + ".ckpt"), again.data);
  p.Stop();  // exits cleanly: the limit never killed it
}


}  // namespace
}  // namespace flatstate::testing
