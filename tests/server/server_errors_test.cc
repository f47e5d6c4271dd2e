// In-process server tests of rejected calls: every error code of Generate and the unary RPCs,
// --max_sessions and the KV pool, the bearer token.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "tests/server/server_test_fixture.h"

namespace flatstate::testing {
namespace {

using ::testing::HasSubstr;

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

// Session store flags that cannot work refuse the start with a message naming them.
TEST(ServerOptionsTest, BadSessionStoreFlagsAreRefusedAtCreate) {
  server::ServerOptions o = TestOptions();
  o.session_lease = absl::Milliseconds(10);
  absl::StatusOr<std::unique_ptr<server::Server>> s = server::Server::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("session_lease"));
  o = TestOptions();
  o.session_ttl = absl::Seconds(1);  // not longer than the 5 s lease
  s = server::Server::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("session_ttl"));
  o = TestOptions();
  o.session_store = "rediss://127.0.0.1:1";
  s = server::Server::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("session_store"));
}

TEST(ServerOptionsTest, UnknownWeightDtypeIsRefusedAtCreate) {
  server::ServerOptions o = TestOptions();
  o.weight_dtype = "int2";
  absl::StatusOr<std::unique_ptr<server::Server>> s = server::Server::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("weight_dtype"));
}

TEST(ServerOptionsTest, UnknownHeadDtypeIsRefusedAtCreate) {
  server::ServerOptions o = TestOptions();
  o.head_dtype = "fp8";
  absl::StatusOr<std::unique_ptr<server::Server>> s = server::Server::Create(o);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("head_dtype: unknown type"));
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

}  // namespace
}  // namespace flatstate::testing
