// The OpenAI-compatible HTTP API through real sockets (in-process server, httplib client): every
// endpoint, the SSE format, usage, seeds, stop strings, logprobs against the engine's own logits
// (Engine::Score, computed here independently) and against the PyTorch reference's (the golden
// vectors, shipped models), sessions and a session shared with gRPC.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

std::string GrpcText(pb::Inference::Stub* stub, const std::string& model, const std::string& p,
                     uint32_t n) {
  StreamResult r = RunGenerate(stub, GenRequest(model, p, n));
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  return r.text;
}

TEST_F(HttpTest, HealthAndModels) {
  EXPECT_EQ(GetJson(*http_, "/health").status, 200);
  HttpReply m = GetJson(*http_, "/v1/models");
  ASSERT_EQ(m.status, 200) << m.raw;
  EXPECT_EQ(m.body["object"], "list");
  ASSERT_EQ(m.body["data"].size(), 2u);
  EXPECT_EQ(m.body["data"][0]["id"], kLinear);
  EXPECT_EQ(m.body["data"][0]["object"], "model");
  EXPECT_EQ(m.body["data"][0]["attention_kind"], "linear_elu");
  EXPECT_EQ(m.body["data"][0]["state_bytes_per_session"],
            SmallConfig(AttentionKind::kLinearElu).state_bytes());
  EXPECT_EQ(m.body["data"][1]["attention_kind"], "softmax");
}

TEST_F(HttpTest, CompletionMatchesGrpcAndCountsUsage) {
  const std::string want = GrpcText(stub_.get(), kLinear, "hello", 12);
  for (const json& prompt : {json("hello"), json::array({"hello"})}) {
    HttpReply r = Post("/v1/completions", {{"model", kLinear},
                                           {"prompt", prompt},
                                           {"max_tokens", 12},
                                           {"user", "ignored"},
                                           {"some_unknown_field", 1}});
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["object"], "text_completion");
    EXPECT_TRUE(absl::StartsWith(r.body["id"].get<std::string>(), "cmpl-"));
    EXPECT_EQ(r.body["model"], kLinear);
    EXPECT_FALSE(r.body.contains("session_id"));  // throwaway
    EXPECT_EQ(r.body["choices"][0]["text"], want);
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
    EXPECT_TRUE(r.body["choices"][0]["logprobs"].is_null());
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(r.body["usage"]["completion_tokens"], 12);
    EXPECT_EQ(r.body["usage"]["total_tokens"], 17);
  }
  // max_completion_tokens is max_tokens' newer name.
  HttpReply r = Post("/v1/completions", {{"prompt", "hello"}, {"max_completion_tokens", 3}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 3);
}

TEST_F(HttpTest, StreamingChunksUsageAndDone) {
  const json req = {{"model", kSoftmax}, {"prompt", "stream me"}, {"max_tokens", 20}};
  HttpReply whole = Post("/v1/completions", req);
  ASSERT_EQ(whole.status, 200) << whole.raw;
  json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  auto res = http_->Post("/v1/completions", sreq.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_TRUE(absl::StartsWith(res->get_header_value("Content-Type"), "text/event-stream"));
  SseBody sse = ParseSse(res->body);
  EXPECT_TRUE(sse.well_formed) << res->body;
  EXPECT_TRUE(sse.done);
  ASSERT_GE(sse.events.size(), 3u);
  std::string text;
  const size_t n = sse.events.size();
  for (size_t i = 0; i + 2 < n; ++i) {
    EXPECT_EQ(sse.events[i]["object"], "text_completion");
    EXPECT_TRUE(sse.events[i]["choices"][0]["finish_reason"].is_null());
    EXPECT_TRUE(sse.events[i]["usage"].is_null());
    EXPECT_EQ(sse.events[i]["id"], sse.events[0]["id"]);
    text += sse.events[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, whole.body["choices"][0]["text"]);
  EXPECT_EQ(sse.events[n - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(sse.events[n - 1]["choices"].empty());
  EXPECT_EQ(sse.events[n - 1]["usage"], whole.body["usage"]);

  // Chat: the first delta carries the role; without include_usage no usage key at all.
  auto chat = http_->Post("/v1/chat/completions",
                          json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                               {"max_tokens", 6},
                               {"stream", true}}
                              .dump(),
                          "application/json");
  ASSERT_TRUE(chat);
  SseBody c = ParseSse(chat->body);
  EXPECT_TRUE(c.well_formed && c.done) << chat->body;
  ASSERT_GE(c.events.size(), 2u);
  EXPECT_EQ(c.events[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(c.events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(c.events[0].contains("usage"));
  EXPECT_FALSE(c.events.back()["choices"][0]["finish_reason"].is_null());
}

TEST_F(HttpTest, SeedIsDeterministicAndMatchesTheEngine) {
  auto run = [&](uint64_t seed) {
    HttpReply r = Post("/v1/completions", {{"model", kLinear},
                                           {"prompt", "seeded"},
                                           {"max_tokens", 24},
                                           {"temperature", 0.8},
                                           {"top_k", 40},
                                           {"top_p", 0.95},
                                           {"seed", seed}});
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body["choices"][0]["text"].get<std::string>();
  };
  const std::string a = run(7);
  EXPECT_EQ(run(7), a);
  EXPECT_NE(run(8), a);
  std::vector<int32_t> ref = Reference(kLinear, "seeded", 24, 0.8f, 7);
  IncrementalDecoder d;
  std::string want;
  for (int32_t t : ref) want += d.Push(t);
  want += d.Flush();
  EXPECT_EQ(a, want);
}

TEST_F(HttpTest, StopStringsEndAndAreCut) {
  const std::string full = GrpcText(stub_.get(), kLinear, "stop here", 40);
  size_t at = std::string::npos;
  for (size_t i = 4; i < full.size(); ++i) {
    if (static_cast<unsigned char>(full[i]) < 0x80) {
      at = i;
      break;
    }
  }
  if (at == std::string::npos) GTEST_SKIP() << "no ASCII character to stop at";
  const std::string stop(1, full[at]);
  const std::string want = full.substr(0, full.find(stop));
  for (const json& s : {json(stop), json::array({"never-generated", stop})}) {
    HttpReply r =
        Post("/v1/completions",
             {{"model", kLinear}, {"prompt", "stop here"}, {"max_tokens", 40}, {"stop", s}});
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["text"], want);
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
    EXPECT_LT(r.body["usage"]["completion_tokens"].get<int>(), 40);
  }
}

TEST_F(HttpTest, LogprobsAreTheLogSoftmaxOfTheEngineLogits) {
  const std::string prompt = "logits";
  HttpReply r = Post("/v1/completions",
                     {{"model", kSoftmax}, {"prompt", prompt}, {"max_tokens", 8}, {"logprobs", 3}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& lp = r.body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), 8u);
  const std::vector<int32_t> gen = Reference(kSoftmax, prompt, 8);
  // Independent reference: the engine's logits for prompt + generated tokens, log-softmaxed here.
  auto m = Model::Load(ModelsDir() + "/" + kSoftmax);
  ASSERT_TRUE(m.ok());
  EngineOptions o;
  o.threads = 1;
  o.kv_blocks = 64;
  auto e = Engine::Create(std::move(*m), o);
  ASSERT_TRUE(e.ok());
  SessionState s = (*e)->NewSession(SamplingParams{});
  std::vector<int32_t> toks = Encode(prompt);
  toks.insert(toks.end(), gen.begin(), gen.end() - 1);
  absl::StatusOr<std::vector<float>> logits = (*e)->Score(&s, toks);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const int V = (*e)->config().vocab_size;
  for (size_t j = 0; j < gen.size(); ++j) {
    const float* row = logits->data() + (prompt.size() - 1 + j) * V;
    double mx = row[0], sum = 0;
    for (int v = 0; v < V; ++v) mx = std::max<double>(mx, row[v]);
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    const double want = row[gen[j]] - mx - std::log(sum);
    EXPECT_NEAR(lp["token_logprobs"][j].get<double>(), want, 1e-3) << "token " << j;
    ASSERT_EQ(lp["top_logprobs"][j].size(), 3u);
    // Greedy: the sampled token is the most likely one.
    double best = -1e30;
    for (auto& [tok, l] : lp["top_logprobs"][j].items()) best = std::max(best, l.get<double>());
    EXPECT_NEAR(best, lp["token_logprobs"][j].get<double>(), 1e-6);
  }
  (*e)->ReleaseSession(&s);
  // Chat's shape: content[i] = {token, logprob, bytes, top_logprobs}.
  HttpReply c = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                              {"max_tokens", 4},
                                              {"logprobs", true},
                                              {"top_logprobs", 2}});
  ASSERT_EQ(c.status, 200) << c.raw;
  const json& content = c.body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), c.body["usage"]["completion_tokens"].get<size_t>());
  EXPECT_EQ(content[0]["bytes"].size(), 1u);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_LE(content[0]["logprob"].get<double>(), 0.0);
}

TEST_F(HttpTest, ChatSessionsCheckpointRestoreDelete) {
  const std::string id = NewSession(kLinear);
  ASSERT_EQ(id.size(), 32u);
  const json turn = {{"session_id", id},
                     {"messages", {{{"role", "user"}, {"content", "Good morrow."}}}},
                     {"max_tokens", 10}};
  HttpReply t1 = Post("/v1/chat/completions", turn);
  ASSERT_EQ(t1.status, 200) << t1.raw;
  EXPECT_EQ(t1.body["session_id"], id);
  EXPECT_EQ(t1.body["object"], "chat.completion");
  EXPECT_EQ(t1.body["choices"][0]["message"]["role"], "assistant");
  const uint64_t ctx1 = t1.body["usage"]["context_tokens"];
  EXPECT_EQ(ctx1, t1.body["usage"]["total_tokens"].get<uint64_t>());
  HttpReply got = GetJson(*http_, "/v1/sessions/" + id);
  ASSERT_EQ(got.status, 200) << got.raw;
  EXPECT_EQ(got.body["context_tokens"], ctx1);
  EXPECT_EQ(got.body["model"], kLinear);

  HttpReply ck = Post("/v1/sessions/" + id + "/checkpoint", json::object());
  ASSERT_EQ(ck.status, 200) << ck.raw;
  EXPECT_EQ(ck.body["context_tokens"], ctx1);
  std::string blob;
  ASSERT_TRUE(absl::Base64Unescape(ck.body["data"].get<std::string>(), &blob));
  EXPECT_GT(blob.size(), 0u);
  HttpReply rs = Post("/v1/sessions:restore", {{"data", ck.body["data"]}});
  ASSERT_EQ(rs.status, 200) << rs.raw;
  const std::string copy = rs.body["id"];
  EXPECT_NE(copy, id);
  EXPECT_EQ(rs.body["context_tokens"], ctx1);
  HttpReply by_id = Post("/v1/sessions:restore", {{"checkpoint_id", ck.body["checkpoint_id"]}});
  EXPECT_EQ(by_id.status, 200) << by_id.raw;

  // The original and its restored copy continue identically (greedy), each growing its context.
  json turn2 = turn;
  turn2["messages"][0]["content"] = "And to you.";
  HttpReply a = Post("/v1/chat/completions", turn2);
  turn2["session_id"] = copy;
  HttpReply b = Post("/v1/chat/completions", turn2);
  ASSERT_EQ(a.status, 200) << a.raw;
  ASSERT_EQ(b.status, 200) << b.raw;
  EXPECT_EQ(a.body["choices"][0]["message"]["content"], b.body["choices"][0]["message"]["content"]);
  EXPECT_GT(a.body["usage"]["context_tokens"].get<uint64_t>(), ctx1);

  auto del = http_->Delete(("/v1/sessions/" + copy).c_str());
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 200);
  EXPECT_EQ(GetJson(*http_, "/v1/sessions/" + copy).status, 404);
}

TEST_F(HttpTest, GrpcSessionContinuesOverHttpAndBack) {
  auto create = [&] {
    pb::CreateSessionRequest req;
    req.set_model(kSoftmax);
    pb::Session s;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->CreateSession(&ctx, req, &s).ok());
    return s.session_id();
  };
  auto grpc_turn = [&](const std::string& id, const std::string& p) {
    pb::GenerateRequest req = GenRequest("", p, 6);
    req.set_session_id(id);
    StreamResult r = RunGenerate(stub_.get(), req);
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    return r.text;
  };
  // Reference: three turns over gRPC alone.
  const std::string ref = create();
  std::string want = grpc_turn(ref, "one");  // one statement per turn: they run in order
  want += grpc_turn(ref, "two");
  want += grpc_turn(ref, "three");
  // Mixed: gRPC, HTTP, gRPC on one session.
  const std::string id = create();
  std::string got = grpc_turn(id, "one");
  HttpReply h = Post("/v1/completions", {{"session_id", id}, {"prompt", "two"}, {"max_tokens", 6}});
  ASSERT_EQ(h.status, 200) << h.raw;
  EXPECT_EQ(h.body["session_id"], id);
  EXPECT_EQ(h.body["model"], kSoftmax);
  got += h.body["choices"][0]["text"].get<std::string>();
  got += grpc_turn(id, "three");
  EXPECT_EQ(got, want);
}

// Log-probabilities against the PyTorch reference: for each shipped model, a greedy 1-token
// completion of its golden prompt (tests/data/golden, written by tools/ from the PyTorch model)
// reports, for the first generated token, log_softmax of the reference's logits at the prompt's
// last position, within 1e-3 (the engine's logits match the reference to 1e-4:
// golden_parity_test).
TEST(HttpGolden, LogprobsMatchThePyTorchReference) {
  server::ServerOptions o = HttpTestOptions();
  o.models_dir = std::string(FLATSTATE_SOURCE_DIR) + "/models";
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  httplib::Client http("127.0.0.1", server->http_port());
  http.set_read_timeout(60, 0);
  int checked = 0;
  for (const char* name : {"shakespeare-linear-elu", "shakespeare-cosformer", "shakespeare-cosine",
                           "shakespeare-favor", "shakespeare-softmax"}) {
    std::ifstream in(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/golden/" + name + ".json");
    ASSERT_TRUE(in) << name;
    const json golden = json::parse(in);
    for (const json& c : golden["cases"]) {
      const auto bytes = c["prompt_bytes"].get<std::vector<int>>();
      const auto positions = c["logit_positions"].get<std::vector<int>>();
      const int last = static_cast<int>(bytes.size()) - 1;
      const auto at = std::find(positions.begin(), positions.end(), last);
      if (at == positions.end()) continue;  // no reference logits at the last position
      const auto ref = c["logits"][at - positions.begin()].get<std::vector<double>>();
      std::string prompt(bytes.begin(), bytes.end());
      const json req = {{"model", name},
                        {"prompt", prompt},
                        {"max_tokens", 1},
                        {"temperature", 0.0},
                        {"logprobs", 5}};
      HttpReply r = PostJson(http, "/v1/completions", req.dump());
      ASSERT_EQ(r.status, 200) << name << ": " << r.raw;
      const json& lp = r.body["choices"][0]["logprobs"];
      ASSERT_EQ(lp["token_logprobs"].size(), 1u) << r.raw;
      double mx = ref[0], sum = 0;
      for (double v : ref) mx = std::max(mx, v);
      for (double v : ref) sum += std::exp(v - mx);
      const int greedy = static_cast<int>(std::max_element(ref.begin(), ref.end()) - ref.begin());
      EXPECT_NEAR(lp["token_logprobs"][0].get<double>(), ref[greedy] - mx - std::log(sum), 1e-3)
          << name << " case " << c["name"];
      ++checked;
    }
  }
  EXPECT_GE(checked, 5) << "golden cases with logits at the prompt's last position";
}

}  // namespace
}  // namespace flatstate::testing
