// Checkpoint survives a server restart: real flatstate-server processes (posix_spawn), SIGTERM
// between them, restore in the second, continuation identical to an uninterrupted run; for
// every family of state: linear_elu, softmax (KV blocks), gated, window (the ring), hybrid, and
// the Hugging Face recurrent families (Mamba-2, RWKV-7, the Qwen3.5 hybrid of Gated DeltaNet and
// attention layers, fla's GLA and Gated DeltaNet: the golden folders of tests/data); also mid-JSON
// under a grammar (checkpoint format v2).
#include "tests/system/server_process.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace flatstate::testing {
namespace {

// The kinds of issue 14 (gated, window, hybrid), each a random-weight model in a folder of its
// own, written once per process; the two kinds of ModelsDir are served from there.
const std::string& MoreKindsDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(TempDir() + "/more-kinds");
    uint64_t seed = 21;
    for (AttentionKind k :
         {AttentionKind::kGated, AttentionKind::kWindow, AttentionKind::kHybrid}) {
      EXPECT_TRUE(
          WriteRandomModel(absl::StrCat(*d, "/tiny-", AttentionKindName(k)), SmallConfig(k), seed++)
              .ok());
    }
    return d;
  }();
  return *dir;
}

// The Hugging Face folders, linked under their test names into a folder of their own.
const std::vector<std::pair<std::string, std::string>>& HfFamilies() {
  static const std::vector<std::pair<std::string, std::string>> kFamilies = {
      {"tiny-mamba2", "hf_mamba2_tiny"},
      {"tiny-rwkv7", "hf_rwkv7_tiny"},
      {"tiny-qwen35", "hf_qwen35_tiny"},
      {"tiny-gla", "hf_gla_tiny"},
      {"tiny-gdn-hybrid", "hf_gated_deltanet_hybrid_tiny"}};
  return kFamilies;
}

const std::string& HfFamiliesDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(TempDir() + "/hf-families");
    std::filesystem::create_directories(*d);
    for (const auto& [name, folder] : HfFamilies()) {
      std::error_code ec;
      std::filesystem::create_directory_symlink(
          std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/" + folder, *d + "/" + name, ec);
      EXPECT_FALSE(ec) << ec.message();
    }
    return d;
  }();
  return *dir;
}

// Generates 16 tokens in a session, checkpoints it, stops the server; a new server process
// restores it by id and by the inline bytes, and both continue with the 16 tokens an
// uninterrupted 32-token run gives after the first 16; a corrupt copy is DATA_LOSS there.
// byte_tokens: a byte-level model, prompted with text; otherwise with token ids (not every
// golden folder has a tokenizer.json).
void ExpectCheckpointSurvivesRestart(const std::string& model, const std::vector<std::string>& args,
                                     bool byte_tokens) {
  const std::string ckpt_dir = TempDir() + "/ckpt";
  const std::string prompt = "To be, or not to be, that is the question:";
  const std::vector<int32_t> ids = {1, 17, 42, 99, 7, 250, 3, 64, 128, 5, 77};
  auto prompted = [&](const std::string& m, uint32_t n, float temperature, uint64_t seed) {
    pb::GenerateRequest r = GenRequest(m, byte_tokens ? prompt : "", n, temperature, seed);
    if (!byte_tokens) {
      for (int32_t id : ids) r.add_prompt_tokens(id);
    }
    return r;
  };
  pb::Checkpoint ck;
  std::vector<int32_t> first;
  uint64_t context = 0;
  {
    ServerProcess p1(ckpt_dir, args);
    pb::CreateSessionRequest creq;
    creq.set_model(model);
    creq.mutable_sampling()->set_temperature(0.9f);
    creq.mutable_sampling()->set_top_k(50);
    creq.mutable_sampling()->set_top_p(0.9f);
    creq.mutable_sampling()->set_seed(1234);
    pb::Session s;
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(p1.stub()->CreateSession(&ctx, creq, &s).ok());
    }
    pb::GenerateRequest req = prompted("", 16, 0.f, 0);
    req.set_session_id(s.session_id());
    StreamResult r = RunGenerate(p1.stub(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    first = r.tokens;
    ASSERT_EQ(first.size(), 16u);
    pb::GetSessionRequest greq;
    greq.set_session_id(s.session_id());
    pb::Session now;
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(p1.stub()->GetSession(&ctx, greq, &now).ok());
    }
    context = now.context_tokens();
    if (byte_tokens) {
      EXPECT_EQ(context, prompt.size() + 16);
    }
    pb::CheckpointSessionRequest ckreq;
    ckreq.set_session_id(s.session_id());
    grpc::ClientContext ctx;
    grpc::Status st = p1.stub()->CheckpointSession(&ctx, ckreq, &ck);
    ASSERT_TRUE(st.ok()) << st.error_message();
    p1.Stop();
  }
  ServerProcess p2(ckpt_dir, args);
  // Restore by id (from --checkpoint_dir) and by the inline bytes: both continue identically.
  std::vector<std::vector<int32_t>> continuations;
  for (int by_id = 0; by_id < 2; ++by_id) {
    pb::RestoreSessionRequest rreq;
    if (by_id) rreq.set_checkpoint_id(ck.checkpoint_id());
    else rreq.set_data(ck.data());
    pb::Session restored;
    grpc::ClientContext ctx;
    grpc::Status st = p2.stub()->RestoreSession(&ctx, rreq, &restored);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(restored.model(), model);
    EXPECT_EQ(restored.context_tokens(), context);
    pb::GenerateRequest more = GenRequest("", "", 16);
    more.set_session_id(restored.session_id());
    StreamResult r = RunGenerate(p2.stub(), more);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    continuations.push_back(r.tokens);
  }
  // Uninterrupted run in the same (second) process: one session, 32 tokens.
  pb::GenerateRequest whole = prompted(model, 32, 0.9f, 1234);
  whole.mutable_sampling()->set_top_k(50);
  whole.mutable_sampling()->set_top_p(0.9f);
  StreamResult w = RunGenerate(p2.stub(), whole);
  ASSERT_TRUE(w.status.ok()) << w.status.error_message();
  std::vector<int32_t> resumed = first;
  resumed.insert(resumed.end(), continuations[0].begin(), continuations[0].end());
  EXPECT_EQ(resumed, w.tokens);
  EXPECT_EQ(continuations[0], continuations[1]);
  // A corrupt copy of the checkpoint is DATA_LOSS in the new process too.
  std::string bad = ck.data();
  bad[bad.size() - 10] ^= 0x40;
  pb::RestoreSessionRequest rreq;
  rreq.set_data(bad);
  pb::Session restored;
  grpc::ClientContext ctx;
  EXPECT_EQ(p2.stub()->RestoreSession(&ctx, rreq, &restored).error_code(),
            grpc::StatusCode::DATA_LOSS);
}

class ProcessRestartTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::vector<std::string> Args() const {
    const std::string m = GetParam();
    if (m == kLinear || m == kSoftmax) return {};
    return {"--models_dir=" + MoreKindsDir()};
  }
};

TEST_P(ProcessRestartTest, CheckpointSurvivesRestart) {
  ExpectCheckpointSurvivesRestart(GetParam(), Args(), /*byte_tokens=*/true);
}

// A session cut mid-JSON (constrained by a JSON Schema, checkpoint format v2) continues in a new
// process to exactly the output of an uninterrupted constrained run, which parses.
TEST_P(ProcessRestartTest, MidJsonCheckpointSurvivesRestart) {
  const std::string model = GetParam();
  const std::string ckpt_dir = TempDir() + "/ckpt";
  const std::string schema =
      R"({"type": "object", "properties": {"id": {"type": "integer", "minimum": 0,
          "maximum": 9999}, "tag": {"type": "string", "maxLength": 12}},
          "required": ["id", "tag"]})";
  auto request = [&](const std::string& prompt, uint32_t n) {
    pb::GenerateRequest r = GenRequest(model, prompt, n, 0.9f, 99);
    r.set_json_schema(schema);
    return r;
  };
  pb::Checkpoint ck;
  std::string first;
  {
    ServerProcess p1(ckpt_dir, Args());
    pb::CreateSessionRequest creq;
    creq.set_model(model);
    creq.mutable_sampling()->set_temperature(0.9f);
    creq.mutable_sampling()->set_top_k(40);
    creq.mutable_sampling()->set_top_p(0.95f);
    creq.mutable_sampling()->set_seed(99);
    pb::Session s;
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(p1.stub()->CreateSession(&ctx, creq, &s).ok());
    }
    pb::GenerateRequest req = request("json:", 5);
    req.clear_model();
    req.clear_sampling();  // the session's, as the uninterrupted run's below
    req.set_session_id(s.session_id());
    StreamResult r = RunGenerate(p1.stub(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.last.finish_reason(), pb::LENGTH);
    first = r.text;
    pb::CheckpointSessionRequest ckreq;
    ckreq.set_session_id(s.session_id());
    grpc::ClientContext ctx;
    ASSERT_TRUE(p1.stub()->CheckpointSession(&ctx, ckreq, &ck).ok());
    p1.Stop();
  }
  ServerProcess p2(ckpt_dir, Args());
  pb::RestoreSessionRequest rreq;
  rreq.set_checkpoint_id(ck.checkpoint_id());
  pb::Session restored;
  {
    grpc::ClientContext ctx;
    grpc::Status st = p2.stub()->RestoreSession(&ctx, rreq, &restored);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  pb::GenerateRequest more = GenRequest("", "", 400);
  more.set_session_id(restored.session_id());
  StreamResult tail = RunGenerate(p2.stub(), more);
  ASSERT_TRUE(tail.status.ok()) << tail.status.error_message();
  EXPECT_EQ(tail.last.finish_reason(), pb::STOP);
  StreamResult whole = RunGenerate(p2.stub(), request("json:", 400));
  ASSERT_TRUE(whole.status.ok()) << whole.status.error_message();
  EXPECT_EQ(first + tail.text, whole.text);
  EXPECT_EQ(whole.last.finish_reason(), pb::STOP);
  EXPECT_FALSE(nlohmann::json::parse(whole.text, nullptr, false).is_discarded()) << whole.text;
}

INSTANTIATE_TEST_SUITE_P(Models, ProcessRestartTest,
                         ::testing::Values(kLinear, kSoftmax, "tiny-gated", "tiny-window",
                                           "tiny-hybrid"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           std::string n = std::string(i.param).substr(5);  // after "tiny-"
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

class HfProcessRestartTest : public ::testing::TestWithParam<std::string> {};

TEST_P(HfProcessRestartTest, CheckpointSurvivesRestart) {
  ExpectCheckpointSurvivesRestart(GetParam(), {"--models_dir=" + HfFamiliesDir()},
                                  /*byte_tokens=*/false);
}

INSTANTIATE_TEST_SUITE_P(HfFamilies, HfProcessRestartTest,
                         ::testing::Values("tiny-mamba2", "tiny-rwkv7", "tiny-qwen35", "tiny-gla",
                                           "tiny-gdn-hybrid"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param.substr(5);  // after "tiny-"
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace flatstate::testing
