// Fault injection: the server is SIGKILLed at random moments while clients hammer
// CheckpointSession; afterwards every acknowledged checkpoint is on disk byte for byte, restores by
// id and continues exactly like its inline copy, no torn file is ever accepted, and the next
// server start deletes the temporary files the kills left. An unwritable --checkpoint_dir fails
// the checkpoint call (INTERNAL) and a full one (a file size limit) with RESOURCE_EXHAUSTED; the
// server keeps serving either way.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "server/checkpoint_store.h"
#include "server/ids.h"
#include "tests/system/server_process.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;

struct Acked {
  std::string checkpoint_id;
  std::string data;
  uint64_t context_tokens = 0;
};

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

grpc::Status Restore(pb::Inference::Stub* stub, const pb::RestoreSessionRequest& req,
                     pb::Session* out) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return stub->RestoreSession(&ctx, req, out);
}

void Delete(pb::Inference::Stub* stub, const std::string& session_id) {
  grpc::ClientContext ctx;
  pb::DeleteSessionRequest req;
  req.set_session_id(session_id);
  pb::DeleteSessionResponse resp;
  EXPECT_TRUE(stub->DeleteSession(&ctx, req, &resp).ok());
}

grpc::Status RestoreById(pb::Inference::Stub* stub, const std::string& id) {
  pb::RestoreSessionRequest req;
  req.set_checkpoint_id(id);
  pb::Session s;
  grpc::Status st = Restore(stub, req, &s);
  if (st.ok()) Delete(stub, s.session_id());
  return st;
}

// Restores `req`, generates 4 more tokens, deletes the session; the tokens (empty on failure).
std::vector<int32_t> RestoreAndContinue(pb::Inference::Stub* stub,
                                        const pb::RestoreSessionRequest& req,
                                        uint64_t context_tokens) {
  pb::Session s;
  grpc::Status st = Restore(stub, req, &s);
  EXPECT_TRUE(st.ok()) << st.error_message();
  if (!st.ok()) return {};
  EXPECT_EQ(s.context_tokens(), context_tokens);
  pb::GenerateRequest more = GenRequest("", "", 4);
  more.set_session_id(s.session_id());
  StreamResult r = RunGenerate(stub, more);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  Delete(stub, s.session_id());
  return r.tokens;
}

std::string CreateSession(pb::Inference::Stub* stub, const std::string& model, uint64_t seed) {
  pb::CreateSessionRequest req;
  req.set_model(model);
  req.mutable_sampling()->set_temperature(0.9f);
  req.mutable_sampling()->set_top_k(40);
  req.mutable_sampling()->set_seed(seed);
  pb::Session s;
  grpc::ClientContext ctx;
  grpc::Status st = stub->CreateSession(&ctx, req, &s);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return s.session_id();
}

// True while the server answers; false once the call failed because the server died.
bool HammerOnce(pb::Inference::Stub* stub, const std::string& session_id, int k,
                std::mutex* mu, std::vector<Acked>* acked) {
  if (k % 3 == 2) {  // move the session on, so checkpoints differ
    pb::GenerateRequest req = GenRequest("", k % 2 ? "x" : "", 2);
    req.set_session_id(session_id);
    StreamResult r = RunGenerate(stub, req);
    return r.status.ok();
  }
  pb::CheckpointSessionRequest req;
  req.set_session_id(session_id);
  pb::Checkpoint ck;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Status st = stub->CheckpointSession(&ctx, req, &ck);
  if (!st.ok()) {
    // The only acceptable failure is the connection dying under the call.
    EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
    return false;
  }
  std::lock_guard<std::mutex> lock(*mu);
  acked->push_back({ck.checkpoint_id(), ck.data(), ck.context_tokens()});
  return true;
}

TEST(FaultTest, SigkillDuringCheckpointsNeverLosesAnAcknowledgedOne) {
  const std::string dir = TempDir() + "/ckpt";
  std::mt19937 rng(20240601);
  std::mutex mu;
  std::vector<Acked> acked;
  std::vector<size_t> last_of_round;
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    ServerProcess p(dir, {"--log_requests=false"});
    ASSERT_GT(p.port(), 0);
    std::vector<std::string> sessions;
    for (int i = 0; i < 4; ++i) {
      sessions.push_back(CreateSession(p.stub(), i % 2 ? kSoftmax : kLinear, 100 * round + i));
      pb::GenerateRequest req = GenRequest("", absl::StrCat("round ", round, " session ", i), 4);
      req.set_session_id(sessions.back());
      ASSERT_TRUE(RunGenerate(p.stub(), req).status.ok());
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        for (int k = 0; !stop.load(); ++k) {
          if (!HammerOnce(p.stub(), sessions[t + 2 * (k / 3 % 2)], k, &mu, &acked)) return;
        }
      });
    }
    // Let some checkpoints land, then kill at a random moment.
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(150, 700)(rng)));
    p.Kill();
    stop = true;
    for (auto& t : threads) t.join();
    std::lock_guard<std::mutex> lock(mu);
    if (!acked.empty()) last_of_round.push_back(acked.size() - 1);
  }
  ASSERT_GT(acked.size(), 0u);
  int leftover_temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    leftover_temporaries += server::CheckpointStore::IsTemporaryName(e.path().filename().string());
  }
  std::printf("[ fault ] %d kills, %zu acknowledged checkpoints, %d temporary files left\n",
              kRounds, acked.size(), leftover_temporaries);

  // The fresh server deletes the temporary files at start (and nothing else).
  ServerProcess fresh(dir, {"--log_requests=false", "--max_sessions=100000"});
  ASSERT_GT(fresh.port(), 0);
  // 1. Every acknowledged checkpoint is on disk exactly as acknowledged.
  for (const Acked& a : acked) {
    const std::string on_disk = ReadBytes(dir + "/" + a.checkpoint_id + ".ckpt");
    EXPECT_TRUE(on_disk == a.data) << a.checkpoint_id << ": " << on_disk.size() << " bytes on disk, "
                                   << a.data.size() << " acknowledged";
  }
  // 2. It restores by id and continues exactly like its inline copy (a sample, always including
  // the last checkpoint acknowledged before each kill).
  const size_t stride = std::max<size_t>(1, acked.size() / 40);
  for (size_t i = 0; i < acked.size(); ++i) {
    const bool last = std::find(last_of_round.begin(), last_of_round.end(), i) !=
                      last_of_round.end();
    if (i % stride != 0 && !last) continue;
    const Acked& a = acked[i];
    pb::RestoreSessionRequest by_id, by_data;
    by_id.set_checkpoint_id(a.checkpoint_id);
    by_data.set_data(a.data);
    const std::vector<int32_t> from_file = RestoreAndContinue(fresh.stub(), by_id, a.context_tokens);
    const std::vector<int32_t> inline_copy =
        RestoreAndContinue(fresh.stub(), by_data, a.context_tokens);
    EXPECT_EQ(from_file.size(), 4u);
    EXPECT_EQ(from_file, inline_copy) << a.checkpoint_id;
  }
  // 3. Every file in the directory restores or is DATA_LOSS; no temporary file is left.
  int checkpoints = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::string id = name.substr(0, server::kIdHexChars);
    if (name == id + ".ckpt" && server::IsValidId(id)) {
      ++checkpoints;
      const grpc::Status st = RestoreById(fresh.stub(), id);
      EXPECT_TRUE(st.ok() || st.error_code() == grpc::StatusCode::DATA_LOSS)
          << name << ": " << st.error_message();
    } else {
      ADD_FAILURE() << "unexpected file in --checkpoint_dir: " << name;
    }
  }
  std::printf("[ fault ] %d checkpoint files\n", checkpoints);
  EXPECT_GE(checkpoints, static_cast<int>(acked.size()));

  // 4. Torn files planted by hand: every truncation and a flipped byte are DATA_LOSS, a complete
  // temporary file is not a checkpoint.
  const std::string& blob = acked.back().data;
  for (size_t len = 0; len < blob.size(); len += std::max<size_t>(1, blob.size() / 24)) {
    const std::string id = server::NewId();
    WriteBytes(dir + "/" + id + ".ckpt", blob.substr(0, len));
    EXPECT_EQ(RestoreById(fresh.stub(), id).error_code(), grpc::StatusCode::DATA_LOSS)
        << "prefix of " << len << " bytes";
  }
  std::string flipped = blob;
  flipped[flipped.size() / 2] ^= 1;
  const std::string flipped_id = server::NewId();
  WriteBytes(dir + "/" + flipped_id + ".ckpt", flipped);
  EXPECT_EQ(RestoreById(fresh.stub(), flipped_id).error_code(), grpc::StatusCode::DATA_LOSS);
  const std::string tmp_id = server::NewId();
  WriteBytes(dir + "/" + tmp_id + ".ckpt.tmp.0123abcd", blob);
  EXPECT_EQ(RestoreById(fresh.stub(), tmp_id).error_code(), grpc::StatusCode::NOT_FOUND);
}

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

// A SIGKILL between create and rename leaves "<id>.ckpt.tmp.<hex>" behind; the next server start
// deletes exactly those files. Planted here: temporaries of both kinds (one of them next to the
// finished checkpoint of the same id), and look-alikes that are not the store's and must stay.
TEST(FaultTest, ServerStartRemovesLeftoverTemporaryFilesAndNothingElse) {
  const std::string dir = TempDir() + "/ckpt";
  Acked ck;
  std::vector<int32_t> expected;
  {
    ServerProcess p(dir, {"--log_requests=false"});
    ASSERT_GT(p.port(), 0);
    const std::string sid = CreateSession(p.stub(), kLinear, 3);
    pb::GenerateRequest req = GenRequest("", "stale temporaries", 4);
    req.set_session_id(sid);
    ASSERT_TRUE(RunGenerate(p.stub(), req).status.ok());
    pb::CheckpointSessionRequest creq;
    creq.set_session_id(sid);
    pb::Checkpoint c;
    grpc::ClientContext ctx;
    ASSERT_TRUE(p.stub()->CheckpointSession(&ctx, creq, &c).ok());
    ck = {c.checkpoint_id(), c.data(), c.context_tokens()};
    pb::GenerateRequest more = GenRequest("", "", 4);
    more.set_session_id(sid);
    expected = RunGenerate(p.stub(), more).tokens;  // what the checkpoint must continue with
    ASSERT_EQ(expected.size(), 4u);
  }
  const std::vector<std::string> stale = {
      server::NewId() + ".ckpt.tmp.0123abcd",     // complete blob, never renamed
      ck.checkpoint_id + ".ckpt.tmp.89abcdef",    // torn rewrite next to the real file
      server::NewId() + ".evicted.tmp.ffffffff",  // an eviction cut short
  };
  WriteBytes(dir + "/" + stale[0], ck.data);
  WriteBytes(dir + "/" + stale[1], ck.data.substr(0, ck.data.size() / 3));
  WriteBytes(dir + "/" + stale[2], "");
  const std::vector<std::string> keep = {
      server::NewId() + ".ckpt.tmp.0123abc",   // 7 hex characters
      server::NewId() + ".ckpt.tmp.0123ABCD",  // upper case
      server::NewId() + ".ckpt.tmp.0123abcd.bak",
      "notes.tmp.01234567",
      server::NewId() + ".evicted",
  };
  for (const std::string& name : keep) WriteBytes(dir + "/" + name, "not ours");
  const std::string dir_named_like_tmp = dir + "/" + server::NewId() + ".ckpt.tmp.00000000";
  fs::create_directory(dir_named_like_tmp);

  ServerProcess p(dir, {"--log_requests=false"});
  ASSERT_GT(p.port(), 0);
  for (const std::string& name : stale) EXPECT_FALSE(fs::exists(dir + "/" + name)) << name;
  for (const std::string& name : keep) EXPECT_TRUE(fs::exists(dir + "/" + name)) << name;
  EXPECT_TRUE(fs::is_directory(dir_named_like_tmp));
  EXPECT_EQ(ReadBytes(dir + "/" + ck.checkpoint_id + ".ckpt"), ck.data);
  pb::RestoreSessionRequest by_id;
  by_id.set_checkpoint_id(ck.checkpoint_id);
  EXPECT_EQ(RestoreAndContinue(p.stub(), by_id, ck.context_tokens), expected);
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
