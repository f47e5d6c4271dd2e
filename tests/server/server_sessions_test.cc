// In-process server tests of session state outside a stream: checkpoint and restore (inline and
// by id, corrupt data), forks (ForkSession), idle eviction to --checkpoint_dir and the transparent restore.
#include <httplib.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/server_test_fixture.h"

namespace flatstate::testing {
namespace {

TEST_F(ServerTest, CheckpointRestoreInProcess) {
  for (const char* model : {kLinear, kSoftmax}) {
    pb::Session s = Create(model, 0.9f, 77);
    pb::GenerateRequest req = GenRequest("", "checkpoint here", 12);
    req.set_session_id(s.session_id());
    ASSERT_TRUE(RunGenerate(stub_.get(), req).status.ok());
    pb::CheckpointSessionRequest creq;
    creq.set_session_id(s.session_id());
    pb::Checkpoint ck;
    {
      grpc::ClientContext ctx;
      grpc::Status st = stub_->CheckpointSession(&ctx, creq, &ck);
      ASSERT_TRUE(st.ok()) << st.error_message();
    }
    EXPECT_EQ(ck.context_tokens(), 15u + 12u);
    EXPECT_EQ(ck.checkpoint_id().size(), 32u);
    EXPECT_EQ(ck.model(), model);
    // Restore twice (inline bytes and by id); all three continue identically.
    std::vector<std::string> ids = {s.session_id()};
    for (int by_id = 0; by_id < 2; ++by_id) {
      pb::RestoreSessionRequest rreq;
      if (by_id) rreq.set_checkpoint_id(ck.checkpoint_id());
      else rreq.set_data(ck.data());
      pb::Session restored;
      grpc::ClientContext ctx;
      grpc::Status st = stub_->RestoreSession(&ctx, rreq, &restored);
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_EQ(restored.model(), model);
      EXPECT_EQ(restored.context_tokens(), ck.context_tokens());
      ids.push_back(restored.session_id());
    }
    const std::vector<int32_t> ref = Reference(model, "checkpoint here", 12 + 8, 0.9f, 77);
    for (const std::string& id : ids) {
      pb::GenerateRequest more = GenRequest("", "", 8);
      more.set_session_id(id);
      StreamResult r = RunGenerate(stub_.get(), more);
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      EXPECT_EQ(r.tokens, std::vector<int32_t>(ref.begin() + 12, ref.end())) << model;
    }
    // Corrupt and truncated checkpoints: DATA_LOSS.
    for (int kind = 0; kind < 3; ++kind) {
      std::string bad = ck.data();
      if (kind == 0) bad[bad.size() / 2] ^= 0x5a;
      if (kind == 1) bad.resize(bad.size() - 7);
      if (kind == 2) bad[30] ^= 0x01;  // inside the fingerprint
      pb::RestoreSessionRequest rreq;
      rreq.set_data(bad);
      pb::Session restored;
      grpc::ClientContext ctx;
      grpc::Status st = stub_->RestoreSession(&ctx, rreq, &restored);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << kind << " " << st.error_message();
    }
  }
}

// ForkSession: each fork continues exactly as the original would; a fork given sampling params
// samples its own branch (the same bits as a session created with them at that point would
// not be checkable here, so: reproducible across two forks with the same params); errors.
TEST_F(ServerTest, ForkSessionBranchesExactly) {
  for (const char* model : {kLinear, kSoftmax}) {
    pb::Session s = Create(model, 0.9f, 77);
    pb::GenerateRequest req = GenRequest("", "fork me here", 10);
    req.set_session_id(s.session_id());
    ASSERT_TRUE(RunGenerate(stub_.get(), req).status.ok());
    auto fork = [&](const pb::SamplingParams* sampling) {
      pb::ForkSessionRequest freq;
      freq.set_session_id(s.session_id());
      if (sampling != nullptr) *freq.mutable_sampling() = *sampling;
      pb::Session out;
      grpc::ClientContext ctx;
      grpc::Status st = stub_->ForkSession(&ctx, freq, &out);
      EXPECT_TRUE(st.ok()) << st.error_message();
      EXPECT_EQ(out.model(), model);
      EXPECT_EQ(out.context_tokens(), 12u + 10u);
      EXPECT_NE(out.session_id(), s.session_id());
      return out.session_id();
    };
    const std::string a = fork(nullptr), b = fork(nullptr);
    pb::SamplingParams other;
    other.set_temperature(1.2f);
    other.set_seed(5);
    const std::string c = fork(&other), d = fork(&other);
    auto more = [&](const std::string& id) {
      pb::GenerateRequest g = GenRequest("", "", 8);
      g.set_session_id(id);
      StreamResult r = RunGenerate(stub_.get(), g);
      EXPECT_TRUE(r.status.ok()) << r.status.error_message();
      return r.tokens;
    };
    const std::vector<int32_t> ref = Reference(model, "fork me here", 10 + 8, 0.9f, 77);
    const std::vector<int32_t> tail(ref.begin() + 10, ref.end());
    EXPECT_EQ(more(a), tail) << model;
    EXPECT_EQ(more(b), tail) << model;
    EXPECT_EQ(more(s.session_id()), tail) << model;  // the original is untouched by its forks
    EXPECT_EQ(more(c), more(d)) << model;
    // Unknown and malformed ids (one that is not 32 hex digits cannot exist either): NOT_FOUND;
    // bad sampling params name the field.
    for (const std::string& id : {std::string(32, 'a'), std::string("nope")}) {
      pb::ForkSessionRequest freq;
      freq.set_session_id(id);
      pb::Session out;
      grpc::ClientContext ctx;
      grpc::Status st = stub_->ForkSession(&ctx, freq, &out);
      EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND) << st.error_message();
    }
    pb::ForkSessionRequest freq;
    freq.set_session_id(s.session_id());
    freq.mutable_sampling()->set_temperature(-1.f);
    pb::Session out;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->ForkSession(&ctx, freq, &out);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("temperature"), std::string::npos) << st.error_message();
  }
}

// GenerateRequest.initial_state: a stateless Generate starts from a stored checkpoint exactly as
// the session continues; with a session_id it is refused, an unknown id is NOT_FOUND.
TEST_F(ServerTest, GenerateStartsFromAStoredState) {
  pb::Session s = Create(kLinear, 0.9f, 77);
  pb::GenerateRequest req = GenRequest("", "state here", 6);
  req.set_session_id(s.session_id());
  ASSERT_TRUE(RunGenerate(stub_.get(), req).status.ok());
  pb::CheckpointSessionRequest creq;
  creq.set_session_id(s.session_id());
  pb::Checkpoint ck;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->CheckpointSession(&ctx, creq, &ck).ok());
  }
  pb::GenerateRequest more = GenRequest("", "", 8);
  more.set_session_id(s.session_id());
  StreamResult want = RunGenerate(stub_.get(), more);
  ASSERT_TRUE(want.status.ok()) << want.status.error_message();
  pb::GenerateRequest from = GenRequest(kLinear, "", 8);
  from.set_initial_state(ck.checkpoint_id());
  StreamResult got = RunGenerate(stub_.get(), from);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message();
  EXPECT_EQ(got.tokens, want.tokens);
  from.set_session_id(s.session_id());
  EXPECT_EQ(RunGenerate(stub_.get(), from).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  from.clear_session_id();
  from.set_initial_state(std::string(32, 'd'));
  StreamResult missing = RunGenerate(stub_.get(), from);
  EXPECT_EQ(missing.status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(missing.status.error_message().find("initial_state"), std::string::npos)
      << missing.status.error_message();
}

TEST(ServerEviction, IdleSessionEvictedAndRestoredTransparently) {
  server::ServerOptions o = TestOptions();
  o.session_idle_ttl = absl::Milliseconds(500);
  o.metrics_any_port = true;
  o.metrics_host = "127.0.0.1";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  for (const char* model : {kLinear, kSoftmax}) {
    pb::CreateSessionRequest creq;
    creq.set_model(model);
    creq.mutable_sampling()->set_temperature(0.8f);
    creq.mutable_sampling()->set_top_k(40);
    creq.mutable_sampling()->set_top_p(0.95f);
    creq.mutable_sampling()->set_seed(3);
    pb::Session s;
    {
      grpc::ClientContext ctx;
      ASSERT_TRUE(stub->CreateSession(&ctx, creq, &s).ok());
    }
    pb::GenerateRequest req = GenRequest("", "evict me", 10);
    req.set_session_id(s.session_id());
    StreamResult a = RunGenerate(stub.get(), req);
    ASSERT_TRUE(a.status.ok());
    // Wait for this session's eviction, without touching the session. (Not the stats count: the
    // previous model's session is evicted again meanwhile.)
    bool evicted = false;
    for (int i = 0; i < 100 && !evicted; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      evicted = std::ifstream(o.checkpoint_dir + "/" + s.session_id() + ".evicted").good();
    }
    ASSERT_TRUE(evicted);
    pb::ServerStats stats;
    grpc::ClientContext sctx;
    ASSERT_TRUE(stub->GetStats(&sctx, pb::GetStatsRequest(), &stats).ok());
    EXPECT_GE(stats.evicted_sessions(), 1u);
    req.clear_prompt();
    StreamResult b = RunGenerate(stub.get(), req);
    ASSERT_TRUE(b.status.ok()) << b.status.error_message();
    std::vector<int32_t> all = a.tokens;
    all.insert(all.end(), b.tokens.begin(), b.tokens.end());
    EXPECT_EQ(all, Reference(model, "evict me", 20, 0.8f, 3)) << model;
    EXPECT_EQ(b.last.usage().context_tokens(), 8u + 20u);
  }
  httplib::Client http("127.0.0.1", server->metrics_port());
  auto res = http.Get("/metrics");
  ASSERT_TRUE(res);
  // The first session may idle out again while the second one is tested, and on a loaded
  // machine (sanitizers, -j2) a session can idle out between CreateSession and its first
  // Generate and be restored for it: each session is evicted and restored at least once.
  EXPECT_GE(MetricValue(res->body, "flatstate_sessions_evicted_total"), 2u);
  EXPECT_GE(MetricValue(res->body, "flatstate_sessions_restored_total"), 2u);
}

}  // namespace
}  // namespace flatstate::testing
