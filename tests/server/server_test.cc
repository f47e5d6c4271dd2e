// In-process server tests: streamed output equals the engine, concurrent streams, every error
// code, cancellation, sessions, in-process checkpoint/restore, auth, health, eviction, metrics.
#include <httplib.h>

#include <atomic>
#include <fstream>
#include <thread>

#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/server/server_test_util.h"

namespace flatstate::testing {
namespace {

using ::testing::HasSubstr;

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = StartServer(TestOptions()).release();
    ASSERT_NE(server_, nullptr);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { stub_ = Connect(server_->port()); }

  pb::Session Create(const std::string& model, float temperature = 0.f, uint64_t seed = 0) {
    pb::CreateSessionRequest req;
    req.set_model(model);
    if (temperature > 0) {
      req.mutable_sampling()->set_temperature(temperature);
      req.mutable_sampling()->set_top_k(40);
      req.mutable_sampling()->set_top_p(0.95f);
      req.mutable_sampling()->set_seed(seed);
    }
    pb::Session s;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->CreateSession(&ctx, req, &s);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return s;
  }
  pb::Session Get(const std::string& id, grpc::Status* status = nullptr) {
    pb::GetSessionRequest req;
    req.set_session_id(id);
    pb::Session s;
    grpc::ClientContext ctx;
    grpc::Status st = stub_->GetSession(&ctx, req, &s);
    if (status != nullptr) *status = st;
    else EXPECT_TRUE(st.ok()) << st.error_message();
    return s;
  }

  static server::Server* server_;
  std::unique_ptr<pb::Inference::Stub> stub_;
};
server::Server* ServerTest::server_ = nullptr;

TEST_F(ServerTest, StreamEqualsEngineOutput) {
  for (const char* model : {kLinear, kSoftmax}) {
    for (float temp : {0.f, 0.9f}) {
      const std::string prompt = "ROMEO: but soft, what light through yonder window breaks?";
      StreamResult r = RunGenerate(stub_.get(), GenRequest(model, prompt, 40, temp, 5));
      ASSERT_TRUE(r.status.ok()) << r.status.error_message();
      const std::vector<int32_t> ref = Reference(model, prompt, 40, temp, 5);
      EXPECT_EQ(r.tokens, ref) << model << " T=" << temp;
      EXPECT_EQ(r.text, Decode(ref));
      EXPECT_TRUE(IsValidUtf8(r.text));
      EXPECT_EQ(r.last.finish_reason(), pb::LENGTH);
      EXPECT_EQ(r.last.usage().prompt_tokens(), prompt.size());
      EXPECT_EQ(r.last.usage().generated_tokens(), 40u);
      EXPECT_EQ(r.last.usage().context_tokens(), prompt.size() + 40);
      EXPECT_GT(r.last.usage().state_bytes(), 0u);
    }
  }
}

TEST_F(ServerTest, DefaultModelIsLinear) {
  EXPECT_EQ(server_->default_model(), kLinear);
  StreamResult r = RunGenerate(stub_.get(), GenRequest("", "hello", 8));
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.tokens, Reference(kLinear, "hello", 8));
}

TEST_F(ServerTest, ConcurrentStreamsEqualTheirRunAlone) {
  constexpr int kStreams = 32;
  constexpr int kTokens = 24;
  std::vector<std::string> prompts(kStreams), models(kStreams);
  std::vector<pb::Session> sessions(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    models[i] = i % 2 == 0 ? kLinear : kSoftmax;
    // Lengths from 3 to ~190 bytes: some prefills need several steps under the 64-token budget.
    prompts[i] = absl::StrCat("stream ", i, ": ", std::string(static_cast<size_t>(i * 6), 'a' + i % 26));
    sessions[i] = Create(models[i], 0.8f, 100 + i);
  }
  std::vector<StreamResult> results(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      auto stub = Connect(server_->port());
      pb::GenerateRequest req = GenRequest("", prompts[i], kTokens);
      req.set_session_id(sessions[i].session_id());
      results[i] = RunGenerate(stub.get(), req);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status.error_message();
    EXPECT_EQ(results[i].tokens, Reference(models[i], prompts[i], kTokens, 0.8f, 100 + i))
        << "stream " << i;
  }
}

TEST_F(ServerTest, SessionContinuesAcrossCalls) {
  pb::Session s = Create(kLinear, 0.7f, 42);
  pb::GenerateRequest req = GenRequest("", "The quick brown fox", 10);
  req.set_session_id(s.session_id());
  StreamResult a = RunGenerate(stub_.get(), req);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  req.clear_prompt();  // continue from the pending token
  StreamResult b = RunGenerate(stub_.get(), req);
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  std::vector<int32_t> all = a.tokens;
  all.insert(all.end(), b.tokens.begin(), b.tokens.end());
  EXPECT_EQ(all, Reference(kLinear, "The quick brown fox", 20, 0.7f, 42));
  EXPECT_EQ(Get(s.session_id()).context_tokens(), 19u + 20u);
}

TEST_F(ServerTest, StopString) {
  const std::vector<int32_t> ref = Reference(kLinear, "stop test", 30);
  const std::string text = Decode(ref);
  // A stop string that is a valid UTF-8 prefix of the streamed text, ending after token k.
  std::string stop;
  size_t k = 4;
  for (; k < ref.size(); ++k) {
    stop = Decode(std::vector<int32_t>(ref.begin(), ref.begin() + k));
    if (text.compare(0, stop.size(), stop) == 0) break;
  }
  ASSERT_LT(k, ref.size());
  pb::GenerateRequest req = GenRequest(kLinear, "stop test", 30);
  req.add_stop(stop);
  StreamResult r = RunGenerate(stub_.get(), req);
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.last.finish_reason(), pb::STOP);
  // The token that completes the stop string may release more text (a held-back byte).
  EXPECT_LE(r.tokens.size(), k + 1);
  EXPECT_EQ(r.text.compare(0, stop.size(), stop), 0) << r.text;
}

TEST_F(ServerTest, BadRequestsReturnTheirCode) {
  pb::Session busy = Create(kLinear);
  pb::Session fresh = Create(kLinear);
  struct Case {
    const char* name;
    pb::GenerateRequest req;
    grpc::StatusCode code;
    const char* field;
  };
  std::vector<Case> cases;
  auto base = [] { return GenRequest(kLinear, "hi", 4); };
  {
    Case c{"token out of range", base(), grpc::StatusCode::INVALID_ARGUMENT, "prompt_tokens"};
    c.req.clear_prompt();
    c.req.add_prompt_tokens(1);
    c.req.add_prompt_tokens(300);
    cases.push_back(c);
  }
  {
    Case c{"max_new_tokens 0", base(), grpc::StatusCode::INVALID_ARGUMENT, "max_new_tokens"};
    c.req.set_max_new_tokens(0);
    cases.push_back(c);
  }
  {
    Case c{"max_new_tokens over limit", base(), grpc::StatusCode::INVALID_ARGUMENT,
           "max_new_tokens"};
    c.req.set_max_new_tokens(65537);
    cases.push_back(c);
  }
  {
    Case c{"temperature < 0", base(), grpc::StatusCode::INVALID_ARGUMENT, "temperature"};
    c.req.mutable_sampling()->set_temperature(-1);
    cases.push_back(c);
  }
  {
    Case c{"top_p > 1", base(), grpc::StatusCode::INVALID_ARGUMENT, "top_p"};
    c.req.mutable_sampling()->set_top_p(1.5f);
    cases.push_back(c);
  }
  {
    Case c{"top_p < 0", base(), grpc::StatusCode::INVALID_ARGUMENT, "top_p"};
    c.req.mutable_sampling()->set_top_p(-0.5f);
    cases.push_back(c);
  }
  {
    Case c{"both prompts", base(), grpc::StatusCode::INVALID_ARGUMENT, "prompt_tokens"};
    c.req.add_prompt_tokens(5);
    cases.push_back(c);
  }
  {
    Case c{"empty throwaway", base(), grpc::StatusCode::INVALID_ARGUMENT, "empty"};
    c.req.clear_prompt();
    cases.push_back(c);
  }
  {
    Case c{"empty fresh session", base(), grpc::StatusCode::INVALID_ARGUMENT, "empty"};
    c.req.clear_prompt();
    c.req.set_model("");
    c.req.set_session_id(fresh.session_id());
    cases.push_back(c);
  }
  {
    Case c{"unknown model", base(), grpc::StatusCode::INVALID_ARGUMENT, "model"};
    c.req.set_model("no-such-model");
    cases.push_back(c);
  }
  {
    Case c{"unknown session", base(), grpc::StatusCode::NOT_FOUND, "session"};
    c.req.set_session_id(std::string(32, 'a'));
    cases.push_back(c);
  }
  {
    Case c{"malformed session id", base(), grpc::StatusCode::NOT_FOUND, "session"};
    c.req.set_session_id("../../etc/passwd");
    cases.push_back(c);
  }
  {
    Case c{"model mismatch", base(), grpc::StatusCode::INVALID_ARGUMENT, "model"};
    c.req.set_model(kSoftmax);
    c.req.set_session_id(fresh.session_id());
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    StreamResult r = RunGenerate(stub_.get(), c.req);
    EXPECT_EQ(r.status.error_code(), c.code) << c.name << ": " << r.status.error_message();
    EXPECT_THAT(r.status.error_message(), HasSubstr(c.field)) << c.name;
  }

  // Prompt over --max_prompt_tokens (1<<20): a 1 MiB + 1 prompt.
  {
    pb::GenerateRequest req = base();
    req.set_prompt(std::string((1 << 20) + 1, 'x'));
    StreamResult r = RunGenerate(stub_.get(), req);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(r.status.error_message(), HasSubstr("max_prompt_tokens"));
  }

  // One Generate at a time per session: FAILED_PRECONDITION for the second.
  {
    grpc::ClientContext ctx;
    pb::GenerateRequest req = GenRequest("", "long running", 2000);
    req.set_session_id(busy.session_id());
    auto reader = stub_->Generate(&ctx, req);
    pb::GenerateResponse msg;
    ASSERT_TRUE(reader->Read(&msg));  // it is generating now
    pb::GenerateRequest second = GenRequest("", "again", 4);
    second.set_session_id(busy.session_id());
    StreamResult r = RunGenerate(stub_.get(), second);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << r.status.error_message();
    pb::CheckpointSessionRequest creq;
    creq.set_session_id(busy.session_id());
    pb::Checkpoint ck;
    grpc::ClientContext cctx;
    EXPECT_EQ(stub_->CheckpointSession(&cctx, creq, &ck).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
    ctx.TryCancel();
    while (reader->Read(&msg)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }

  // Unary errors.
  {
    pb::GetSessionRequest req;
    req.set_session_id(std::string(32, 'b'));
    pb::Session s;
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->GetSession(&ctx, req, &s).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    pb::CreateSessionRequest req;
    req.set_model("nope");
    pb::Session s;
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->CreateSession(&ctx, req, &s).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    pb::RestoreSessionRequest req;
    req.set_checkpoint_id("../../etc/passwd");
    pb::Session s;
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->RestoreSession(&ctx, req, &s).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    pb::RestoreSessionRequest req;
    req.set_checkpoint_id(std::string(32, 'c'));
    pb::Session s;
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->RestoreSession(&ctx, req, &s).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    pb::DeleteSessionRequest req;
    req.set_session_id(fresh.session_id());
    pb::DeleteSessionResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->DeleteSession(&ctx, req, &resp).ok());
    grpc::ClientContext ctx2;
    EXPECT_EQ(stub_->DeleteSession(&ctx2, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(ServerTest, CancelMidStreamKeepsSessionUsable) {
  for (const char* model : {kLinear, kSoftmax}) {
    pb::Session s = Create(model, 0.8f, 9);
    const std::string prompt = "cancel me";
    std::vector<int32_t> received;
    {
      grpc::ClientContext ctx;
      pb::GenerateRequest req = GenRequest("", prompt, 5000);
      req.set_session_id(s.session_id());
      auto reader = stub_->Generate(&ctx, req);
      pb::GenerateResponse msg;
      for (int i = 0; i < 3 && reader->Read(&msg); ++i) {
        received.insert(received.end(), msg.token_ids().begin(), msg.token_ids().end());
      }
      ctx.TryCancel();
      while (reader->Read(&msg)) {
        received.insert(received.end(), msg.token_ids().begin(), msg.token_ids().end());
      }
      EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    }
    ASSERT_GE(received.size(), 3u);
    // The stream stops within a step; the session holds every token the server emitted, which
    // is what the client received plus at most those still in flight when it cancelled.
    pb::Session after;
    for (int tries = 0; tries < 100; ++tries) {
      after = Get(s.session_id());
      if (!after.generating()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_FALSE(after.generating());
    const size_t emitted = after.context_tokens() - prompt.size();
    EXPECT_GE(emitted, received.size());
    EXPECT_LT(emitted, 5000u);
    const std::vector<int32_t> ref = Reference(model, prompt, static_cast<int>(emitted) + 10, 0.8f, 9);
    EXPECT_EQ(std::vector<int32_t>(ref.begin(), ref.begin() + received.size()), received);
    // The next Generate continues exactly after the emitted tokens.
    pb::GenerateRequest req = GenRequest("", "", 10);
    req.set_session_id(s.session_id());
    StreamResult r = RunGenerate(stub_.get(), req);
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, std::vector<int32_t>(ref.begin() + emitted, ref.end()));
    EXPECT_EQ(r.last.usage().context_tokens(), prompt.size() + emitted + 10);
  }
}

TEST_F(ServerTest, DeadlineStopsStream) {
  pb::Session s = Create(kLinear);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(300));
  pb::GenerateRequest req = GenRequest("", "deadline", 60000);
  req.set_session_id(s.session_id());
  auto reader = stub_->Generate(&ctx, req);
  pb::GenerateResponse msg;
  while (reader->Read(&msg)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  pb::Session after;
  for (int tries = 0; tries < 100; ++tries) {
    after = Get(s.session_id());
    if (!after.generating()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(after.generating());
  EXPECT_LT(after.context_tokens(), 60000u);
}

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

TEST_F(ServerTest, ListModelsAndStats) {
  pb::ListModelsResponse models;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->ListModels(&ctx, pb::ListModelsRequest(), &models).ok());
  }
  ASSERT_EQ(models.models_size(), 2);
  EXPECT_EQ(models.models(0).name(), kLinear);  // sorted by name
  EXPECT_EQ(models.models(1).name(), kSoftmax);
  const pb::ModelInfo& lin = models.models(0);
  const pb::ModelInfo& soft = models.models(1);
  EXPECT_EQ(soft.attention_kind(), "softmax");
  EXPECT_GT(soft.kv_bytes_per_token(), 0u);
  EXPECT_FALSE(soft.is_default());
  EXPECT_EQ(lin.attention_kind(), "linear_elu");
  EXPECT_TRUE(lin.is_default());
  EXPECT_GT(lin.state_bytes_per_session(), 0u);
  EXPECT_EQ(lin.fingerprint().size(), 32u);
  EXPECT_EQ(lin.device(), "cpu");
  Create(kSoftmax);
  pb::ServerStats stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->GetStats(&ctx, pb::GetStatsRequest(), &stats).ok());
  EXPECT_GE(stats.active_sessions(), 1u);
  EXPECT_EQ(stats.kv_blocks_total(), 2048u);
  EXPECT_GT(stats.rss_bytes(), 0u);
  EXPECT_EQ(stats.device(), "cpu");
}

TEST_F(ServerTest, HealthServing) {
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                     grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST(ServerLimits, MaxSessionsAndKvPool) {
  server::ServerOptions o = TestOptions();
  o.max_sessions = 2;
  o.kv_blocks = 4;  // 64 tokens
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  StreamResult r = RunGenerate(stub.get(), GenRequest(kSoftmax, std::string(100, 'k'), 4));
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << r.status.error_message();
  EXPECT_THAT(r.status.error_message(), HasSubstr("KV block"));
  for (int i = 0; i < 3; ++i) {
    pb::CreateSessionRequest req;
    pb::Session s;
    grpc::ClientContext ctx;
    grpc::Status st = stub->CreateSession(&ctx, req, &s);
    if (i < 2) {
      EXPECT_TRUE(st.ok());
    } else {
      EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
      EXPECT_THAT(st.error_message(), HasSubstr("max_sessions"));
    }
  }
}

TEST(ServerAuth, BearerTokenRequiredWhenSet) {
  server::ServerOptions o = TestOptions();
  o.auth_token = "s3cret";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  EXPECT_EQ(RunGenerate(stub.get(), GenRequest(kLinear, "x", 2)).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(RunGenerate(stub.get(), GenRequest(kLinear, "x", 2), "wrong").status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(RunGenerate(stub.get(), GenRequest(kLinear, "x", 2), "s3cret").status.ok());
  {
    pb::ListModelsResponse resp;
    grpc::ClientContext ctx;
    EXPECT_EQ(stub->ListModels(&ctx, pb::ListModelsRequest(), &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    grpc::ClientContext ok_ctx;
    ok_ctx.AddMetadata("authorization", "Bearer s3cret");
    EXPECT_TRUE(stub->ListModels(&ok_ctx, pb::ListModelsRequest(), &resp).ok());
  }
  // The health service stays open.
  ExpectHealthServing(server->port());
}

uint64_t MetricValue(const std::string& body, const std::string& name) {
  const size_t p = body.find("\n" + name + " ");
  if (p == std::string::npos) return 0;
  return std::stoull(body.substr(p + name.size() + 2));
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

TEST(ServerMetrics, EndpointServesCountersThatMove) {
  server::ServerOptions o = TestOptions();
  o.metrics_any_port = true;
  o.metrics_host = "127.0.0.1";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  httplib::Client http("127.0.0.1", server->metrics_port());
  auto before = http.Get("/metrics");
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 200);
  const uint64_t tokens0 = MetricValue(before->body, "flatstate_tokens_generated_total");
  auto stub = Connect(server->port());
  ASSERT_TRUE(RunGenerate(stub.get(), GenRequest(kLinear, "metrics", 16)).status.ok());
  ASSERT_TRUE(RunGenerate(stub.get(), GenRequest(kSoftmax, "metrics", 16)).status.ok());
  EXPECT_EQ(RunGenerate(stub.get(), GenRequest("nope", "metrics", 16)).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  // Request counters are recorded when gRPC reports the call done (OnDone), which may come a
  // moment after the client saw the status: poll briefly.
  std::string b;
  for (int i = 0; i < 100; ++i) {
    auto after = http.Get("/metrics");
    ASSERT_TRUE(after);
    b = after->body;
    if (b.find("code=\"INVALID_ARGUMENT\"} 1") != std::string::npos &&
        b.find("method=\"Generate\",code=\"OK\"} 2") != std::string::npos &&
        MetricValue(b, "flatstate_kv_blocks_free") == 2048u) {  // gauges lag a loop iteration
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(MetricValue(b, "flatstate_tokens_generated_total"), tokens0 + 32);
  EXPECT_THAT(b, HasSubstr("flatstate_requests_total{method=\"Generate\",code=\"OK\"} 2"));
  EXPECT_THAT(b, HasSubstr(
                     "flatstate_requests_total{method=\"Generate\",code=\"INVALID_ARGUMENT\"} 1"));
  EXPECT_EQ(MetricValue(b, "flatstate_time_to_first_token_seconds_count"), 2u);
  EXPECT_EQ(MetricValue(b, "flatstate_inter_token_latency_seconds_count"), 30u);
  EXPECT_GT(MetricValue(b, "flatstate_engine_step_seconds_count"), 0u);
  EXPECT_GT(MetricValue(b, "flatstate_engine_step_batch_size_count"), 0u);
  EXPECT_GT(MetricValue(b, "flatstate_rss_bytes"), 0u);
  EXPECT_THAT(b, HasSubstr("flatstate_active_sessions "));
  EXPECT_THAT(b, HasSubstr("flatstate_evicted_sessions "));
  EXPECT_THAT(b, HasSubstr("flatstate_state_bytes "));
  EXPECT_THAT(b, HasSubstr("flatstate_kv_blocks_used "));
  EXPECT_EQ(MetricValue(b, "flatstate_kv_blocks_free"), 2048u);
}

}  // namespace
}  // namespace flatstate::testing
