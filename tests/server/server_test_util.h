// Helpers for server tests: a models folder with one small random linear_elu model and one small
// random softmax model, in-process servers on free loopback ports, stubs, and reference runs of
// the engine in-process. Test-only; not thread-safe unless stated.
#ifndef FLATSTATE_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define FLATSTATE_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "flatstate/v1/inference.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/util/model_writer.h"

namespace flatstate::testing {

namespace pb = flatstate::v1;

inline constexpr char kLinear[] = "tiny-linear-elu";
inline constexpr char kSoftmax[] = "tiny-softmax";

// Writes (once per process) <tmp>/models/{tiny-linear-elu,tiny-softmax}; returns the models dir.
inline const std::string& ModelsDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(TempDir() + "/models");
    EXPECT_TRUE(
        WriteRandomModel(*d + "/" + kLinear, SmallConfig(AttentionKind::kLinearElu), 11).ok());
    EXPECT_TRUE(
        WriteRandomModel(*d + "/" + kSoftmax, SmallConfig(AttentionKind::kSoftmax), 12).ok());
    return d;
  }();
  return *dir;
}

inline server::ServerOptions TestOptions() {
  server::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.models_dir = ModelsDir();
  o.threads = 1;
  o.device = "cpu";
  o.kv_blocks = 2048;
  o.step_token_budget = 64;
  o.checkpoint_dir = TempDir() + "/ckpt";
  o.metrics_port = 0;
  o.http_port = 0;
  o.log_requests = false;
  return o;
}

inline std::unique_ptr<server::Server> StartServer(const server::ServerOptions& o) {
  auto s = server::Server::Create(o);
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return nullptr;
  absl::Status st = (*s)->Start();
  EXPECT_TRUE(st.ok()) << st;
  return std::move(*s);
}

inline std::unique_ptr<pb::Inference::Stub> Connect(int port) {
  return pb::Inference::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
}

// The whole server's grpc.health.v1 status is SERVING, asked without credentials (health is the
// one service --auth_token leaves open).
inline void ExpectHealthServing(int port) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

struct StreamResult {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  int messages = 0;
  pb::GenerateResponse last;
};

// Reads a Generate stream to its end; `on_message` (if set) runs after each message with the
// result so far.
inline StreamResult ReadGenerate(
    grpc::ClientReaderInterface<pb::GenerateResponse>* reader,
    const std::function<void(const StreamResult&)>& on_message = nullptr) {
  StreamResult r;
  pb::GenerateResponse msg;
  while (reader->Read(&msg)) {
    ++r.messages;
    r.tokens.insert(r.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
    r.text += msg.text();
    r.last = msg;
    if (on_message) on_message(r);
  }
  r.status = reader->Finish();
  return r;
}

inline StreamResult RunGenerate(pb::Inference::Stub* stub, const pb::GenerateRequest& req,
                                const std::string& token = "") {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return ReadGenerate(stub->Generate(&ctx, req).get());
}

inline pb::GenerateRequest GenRequest(const std::string& model, const std::string& prompt,
                                      uint32_t n, float temperature = 0.f, uint64_t seed = 0) {
  pb::GenerateRequest req;
  req.set_model(model);
  req.set_prompt(prompt);
  req.set_max_new_tokens(n);
  if (temperature > 0) {
    req.mutable_sampling()->set_temperature(temperature);
    req.mutable_sampling()->set_top_k(40);
    req.mutable_sampling()->set_top_p(0.95f);
    req.mutable_sampling()->set_seed(seed);
  }
  return req;
}

// The engine run in-process on the same folder: prompt, then `n` sampled tokens.
inline std::vector<int32_t> Reference(const std::string& model, const std::string& prompt, int n,
                                      float temperature = 0.f, uint64_t seed = 0) {
  auto m = Model::Load(ModelsDir() + "/" + model);
  EXPECT_TRUE(m.ok()) << m.status();
  EngineOptions o;
  o.threads = 1;
  o.kv_blocks = 256;
  auto e = Engine::Create(std::move(*m), o);
  EXPECT_TRUE(e.ok()) << e.status();
  SamplingParams sp;
  if (temperature > 0) sp = SamplingParams{temperature, 40, 0.95f, seed};
  SessionState s = (*e)->NewSession(sp);
  EXPECT_TRUE((*e)->Append(&s, Encode(prompt)).ok());
  std::vector<int32_t> out;
  std::vector<StepResult> res;
  while (static_cast<int>(out.size()) < n) {
    StepRequest r{&s, 1 << 30, true};
    absl::Status st = (*e)->Step(std::span<const StepRequest>(&r, 1), &res);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) break;
    if (res[0].sampled) out.push_back(res[0].token);
  }
  (*e)->ReleaseSession(&s);
  return out;
}

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_SERVER_SERVER_TEST_UTIL_H_
