// Fault injection: the server is SIGKILLed at random moments while clients hammer
// CheckpointSession; afterwards every acknowledged checkpoint is on disk byte for byte, restores by
// id and continues exactly like its inline copy, no torn file is ever accepted, and the next
// server start deletes the temporary files the kills left (and nothing else).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/store/checkpoint_store.h"
#include "server/store/ids.h"
#include "tests/system/fault_test_util.h"
#include "tests/system/server_process.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;

grpc::Status RestoreById(pb::Inference::Stub* stub, const std::string& id) {
  pb::RestoreSessionRequest req;
  req.set_checkpoint_id(id);
  pb::Session s;
  grpc::Status st = Restore(stub, req, &s);
  if (st.ok()) Delete(stub, s.session_id());
  return st;
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


}  // namespace
}  // namespace flatstate::testing
