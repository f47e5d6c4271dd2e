// Security: the bearer token on every RPC but health, reflection (grpcurl's) included; with the
// token, reflection describes the API.
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "server/store/ids.h"
#include "tests/system/security_test_util.h"

namespace flatstate::testing {
namespace {

namespace fs = std::filesystem;
namespace rpb = grpc::reflection::v1alpha;
using Code = grpc::StatusCode;

struct ReflectionResult {
  grpc::Status status;
  std::vector<rpb::ServerReflectionResponse> responses;
};

// One ServerReflectionInfo stream: sends `requests`, half-closes, reads every response.
ReflectionResult Reflect(rpb::ServerReflection::Stub* stub, grpc::ClientContext* ctx,
                         const std::vector<rpb::ServerReflectionRequest>& requests) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ReflectionResult r;
  auto stream = stub->ServerReflectionInfo(ctx);
  for (const auto& req : requests) {
    if (!stream->Write(req)) break;
  }
  stream->WritesDone();
  rpb::ServerReflectionResponse resp;
  while (stream->Read(&resp)) r.responses.push_back(resp);
  r.status = stream->Finish();
  return r;
}

rpb::ServerReflectionRequest ListServices() {
  rpb::ServerReflectionRequest req;
  req.set_list_services("");
  return req;
}

rpb::ServerReflectionRequest FileContainingSymbol(const std::string& symbol) {
  rpb::ServerReflectionRequest req;
  req.set_file_containing_symbol(symbol);
  return req;
}

// Every Inference RPC and reflection, called with the given authorization header; with the right
// token each one's expected code.
struct Rpc {
  std::string name;
  std::function<grpc::Status(grpc::ClientContext*)> call;
  Code authorized;
};

std::vector<Rpc> AllRpcs(pb::Inference::Stub* stub, rpb::ServerReflection::Stub* reflection,
                         const std::string& session_id) {
  const std::string absent = server::NewId();
  return {
      {"ServerReflectionInfo",
       [=](grpc::ClientContext* ctx) {
         ReflectionResult r = Reflect(reflection, ctx, {ListServices()});
         // A rejected stream answers nothing; an accepted one answers the one request.
         EXPECT_EQ(r.responses.size(), r.status.ok() ? 1u : 0u);
         return r.status;
       },
       Code::OK},
      {"Generate",
       [=](grpc::ClientContext* ctx) {
         auto reader = stub->Generate(ctx, GenRequest(kLinear, "x", 1));
         pb::GenerateResponse msg;
         while (reader->Read(&msg)) {
         }
         return reader->Finish();
       },
       Code::OK},
      {"CreateSession",
       [=](grpc::ClientContext* ctx) {
         pb::Session s;
         return stub->CreateSession(ctx, pb::CreateSessionRequest(), &s);
       },
       Code::OK},
      {"GetSession",
       [=](grpc::ClientContext* ctx) {
         pb::GetSessionRequest req;
         req.set_session_id(session_id);
         pb::Session s;
         return stub->GetSession(ctx, req, &s);
       },
       Code::OK},
      {"DeleteSession",
       [=](grpc::ClientContext* ctx) {
         pb::DeleteSessionRequest req;
         req.set_session_id(absent);
         pb::DeleteSessionResponse resp;
         return stub->DeleteSession(ctx, req, &resp);
       },
       Code::NOT_FOUND},
      {"CheckpointSession",
       [=](grpc::ClientContext* ctx) {
         pb::CheckpointSessionRequest req;
         req.set_session_id(session_id);
         pb::Checkpoint ck;
         return stub->CheckpointSession(ctx, req, &ck);
       },
       Code::OK},
      {"RestoreSession",
       [=](grpc::ClientContext* ctx) {
         pb::RestoreSessionRequest req;
         req.set_checkpoint_id(absent);
         pb::Session s;
         return stub->RestoreSession(ctx, req, &s);
       },
       Code::NOT_FOUND},
      {"ForkSession",
       [=](grpc::ClientContext* ctx) {
         pb::ForkSessionRequest req;
         req.set_session_id(absent);
         pb::Session s;
         return stub->ForkSession(ctx, req, &s);
       },
       Code::NOT_FOUND},
      {"ListModels",
       [=](grpc::ClientContext* ctx) {
         pb::ListModelsResponse resp;
         return stub->ListModels(ctx, pb::ListModelsRequest(), &resp);
       },
       Code::OK},
      {"GetStats",
       [=](grpc::ClientContext* ctx) {
         pb::ServerStats resp;
         return stub->GetStats(ctx, pb::GetStatsRequest(), &resp);
       },
       Code::OK},
  };
}

TEST(SecurityTest, AuthTokenRequiredOnEveryRpcButHealth) {
  server::ServerOptions o = TestOptions();
  o.auth_token = kToken;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  auto reflection = rpb::ServerReflection::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server->port()), grpc::InsecureChannelCredentials()));
  const std::string right = absl::StrCat("Bearer ", kToken);
  const pb::Session session = NewSession(stub.get(), right);
  const std::vector<std::string> wrong = {
      "",  // no metadata at all
      "Bearer wrong",
      absl::StrCat("bearer ", kToken),
      absl::StrCat("Bearer ", kToken, " "),
      absl::StrCat("Bearer ", std::string(kToken).substr(1)),
      absl::StrCat("Bearer ", kToken, "x"),
      kToken,
      "Bearer ",
      absl::StrCat("Basic ", kToken),
  };
  const std::vector<Rpc> rpcs = AllRpcs(stub.get(), reflection.get(), session.session_id());
  for (const Rpc& rpc : rpcs) {
    for (const std::string& header : wrong) {
      grpc::ClientContext ctx;
      SetAuth(&ctx, header);
      EXPECT_EQ(rpc.call(&ctx).error_code(), Code::UNAUTHENTICATED)
          << rpc.name << " with authorization '" << header << "'";
    }
  }
  // Rejected calls had no effect: still one session, no tokens generated, no checkpoint written.
  {
    pb::ServerStats stats;
    grpc::ClientContext ctx;
    SetAuth(&ctx, right);
    ASSERT_TRUE(stub->GetStats(&ctx, pb::GetStatsRequest(), &stats).ok());
    EXPECT_EQ(stats.active_sessions(), 1u);
    EXPECT_EQ(stats.tokens_generated_total(), 0u);
    EXPECT_TRUE(fs::is_empty(o.checkpoint_dir));
  }
  for (const Rpc& rpc : rpcs) {
    grpc::ClientContext ctx;
    SetAuth(&ctx, right);
    const grpc::Status st = rpc.call(&ctx);
    EXPECT_EQ(st.error_code(), rpc.authorized) << rpc.name << ": " << st.error_message();
  }
  // Health needs no token.
  ExpectHealthServing(server->port());
}

// Reflection (what grpcurl uses) is served by flatstate itself so that it needs the token; with
// it, it describes the API: the service list, the files of symbols with their dependencies, a
// per-request NOT_FOUND that leaves the stream open. Without --auth_token it needs none.
TEST(SecurityTest, ReflectionNeedsTheTokenAndDescribesTheApi) {
  // The request's wire bytes are the upstream protocol's (field numbers 7 and 4).
  EXPECT_EQ(ListServices().SerializeAsString(), std::string("\x3a\x00", 2));
  EXPECT_EQ(FileContainingSymbol("z").SerializeAsString(), std::string("\x22\x01z", 3));

  server::ServerOptions o = TestOptions();
  o.auth_token = kToken;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  auto reflection = rpb::ServerReflection::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", server->port()), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    ReflectionResult r = Reflect(reflection.get(), &ctx, {ListServices()});
    EXPECT_EQ(r.status.error_code(), Code::UNAUTHENTICATED) << r.status.error_message();
    EXPECT_TRUE(r.responses.empty());
  }
  grpc::ClientContext ctx;
  SetAuth(&ctx, absl::StrCat("Bearer ", kToken));
  ReflectionResult r = Reflect(
      reflection.get(), &ctx,
      {ListServices(), FileContainingSymbol("flatstate.v1.Inference"),
       FileContainingSymbol("no.such.Symbol"), FileContainingSymbol("flatstate.v1.GenerateRequest"),
       FileContainingSymbol("grpc.health.v1.Health")});
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  ASSERT_EQ(r.responses.size(), 5u);
  std::set<std::string> services;
  for (const auto& s : r.responses[0].list_services_response().service()) {
    services.insert(s.name());
  }
  EXPECT_EQ(services, (std::set<std::string>{"flatstate.v1.Inference", "grpc.health.v1.Health",
                                             "grpc.reflection.v1alpha.ServerReflection"}));
  // The file declaring the service: all nine RPCs.
  ASSERT_EQ(r.responses[1].file_descriptor_response().file_descriptor_proto_size(), 1);
  google::protobuf::FileDescriptorProto file;
  ASSERT_TRUE(
      file.ParseFromString(r.responses[1].file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.name(), "flatstate/v1/inference.proto");
  ASSERT_EQ(file.service_size(), 1);
  EXPECT_EQ(file.service(0).name(), "Inference");
  EXPECT_EQ(file.service(0).method_size(), 9);
  EXPECT_EQ(r.responses[2].error_response().error_code(), static_cast<int>(Code::NOT_FOUND));
  EXPECT_EQ(r.responses[2].original_request().file_containing_symbol(), "no.such.Symbol");
  EXPECT_EQ(r.responses[3].file_descriptor_response().file_descriptor_proto_size(), 1);
  ASSERT_EQ(r.responses[4].file_descriptor_response().file_descriptor_proto_size(), 1);
  ASSERT_TRUE(
      file.ParseFromString(r.responses[4].file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(file.package(), "grpc.health.v1");

  // No --auth_token: reflection answers without one.
  auto open_server = StartServer(TestOptions());
  ASSERT_NE(open_server, nullptr);
  auto open_reflection = rpb::ServerReflection::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", open_server->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext open_ctx;
  ReflectionResult open = Reflect(open_reflection.get(), &open_ctx, {ListServices()});
  EXPECT_TRUE(open.status.ok()) << open.status.error_message();
  ASSERT_EQ(open.responses.size(), 1u);
  EXPECT_EQ(open.responses[0].list_services_response().service_size(), 3);
}


}  // namespace
}  // namespace flatstate::testing
