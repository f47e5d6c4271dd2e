// The HTTP API's failures through real sockets: every error status in OpenAI's shape naming the
// param, auth, body limits, the session and capacity limits, and a client that disconnects
// mid-stream (the generation stops and the session stays usable).
#include <atomic>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "server/api/status_mapping.h"
#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

void ExpectError(const HttpReply& r, int status, const std::string& param) {
  EXPECT_EQ(r.status, status) << r.raw;
  ASSERT_TRUE(r.body.is_object()) << r.raw;
  const json& e = r.body["error"];
  EXPECT_TRUE(e["message"].is_string()) << r.raw;
  EXPECT_TRUE(e["type"].is_string()) << r.raw;
  EXPECT_TRUE(e["code"].is_string()) << r.raw;
  if (param.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << r.raw;
  } else {
    EXPECT_EQ(e["param"], param) << r.raw;
  }
}

TEST_F(HttpTest, BadRequestsAre400NamingTheParam) {
  const json ok_msgs = {{{"role", "user"}, {"content", "hi"}}};
  struct Case {
    const char* path;
    std::string body;
    const char* param;
  };
  const Case cases[] = {
      {"/v1/completions", "{not json", "body"},
      {"/v1/completions", "[1, 2]", "body"},
      {"/v1/completions", R"({"prompt": 5})", "prompt"},
      {"/v1/completions", R"({"prompt": ["a", "b"]})", "prompt"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": "x"})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 0})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 100000000})", "max_tokens"},
      {"/v1/completions", R"({"prompt": "a", "n": 17})", "n"},
      {"/v1/completions", R"({"prompt": "a", "n": 0})", "n"},
      {"/v1/completions", R"({"prompt": "a", "temperature": -1})", "temperature"},
      {"/v1/completions", R"({"prompt": "a", "top_p": 1.5})", "top_p"},
      {"/v1/completions", R"({"prompt": "a", "stop": 3})", "stop"},
      {"/v1/completions", R"({"prompt": "a", "stop": [""]})", "stop"},
      {"/v1/completions", R"({"prompt": "a", "stream": "yes"})", "stream"},
      {"/v1/completions", R"({"prompt": "a", "logprobs": 99})", "logprobs"},
      {"/v1/completions", R"({"prompt": ""})", "prompt"},
      {"/v1/chat/completions", R"({"messages": "hi"})", "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "tool", "content": "x"}]})",
       "messages[0].role"},
      {"/v1/chat/completions", json{{"messages", ok_msgs}, {"top_logprobs", 2}}.dump(),
       "top_logprobs"},
      {"/v1/chat/completions", json{{"messages", ok_msgs}, {"n", 17}}.dump(), "n"},
      {"/v1/sessions:restore", R"({"data": "!!!not base64"})", "data"},
      {"/v1/sessions:restore", R"({"checkpoint_id": "zz"})", "checkpoint_id"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    ExpectError(PostJson(*http_, c.path, c.body), 400, c.param);
  }
  // The server still serves.
  EXPECT_EQ(Post("/v1/completions", {{"prompt", "a"}, {"max_tokens", 1}}).status, 200);
}

TEST_F(HttpTest, UnknownModelSessionOrPathIs404) {
  ExpectError(Post("/v1/completions", {{"model", "nope"}, {"prompt", "a"}}), 404, "model");
  ExpectError(Post("/v1/sessions", {{"model", "nope"}}), 404, "model");
  const std::string missing(32, 'a');
  ExpectError(Post("/v1/completions", {{"session_id", missing}, {"prompt", "a"}}), 404,
              "session_id");
  ExpectError(Post("/v1/chat/completions",
                   {{"session_id", "bad"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}),
              404, "session_id");
  ExpectError(GetJson(*http_, "/v1/sessions/" + missing), 404, "session_id");
  ExpectError(Post("/v1/sessions/" + missing + "/checkpoint", json::object()), 404, "session_id");
  ExpectError(GetJson(*http_, "/v1/nothing"), 404, "");
}

// Streams `max_tokens` on `session`, reading `chunks` events, then drops the connection.
int StreamThenDisconnect(int port, const std::string& session, int chunks) {
  httplib::Client c("127.0.0.1", port);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body =
      json{{"session_id", session}, {"prompt", "go"}, {"max_tokens", 60000}, {"stream", true}}
          .dump();
  int seen = 0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    seen += static_cast<int>(std::count(data, data + n, '\n')) / 2;
    return seen < chunks;  // false: abort and close the connection
  };
  c.send(req);
  return seen;
}

// Waits (up to 10 s) until session `id` no longer generates, expects its context below
// `max_context` tokens, and that it then runs a 4-token completion.
void ExpectStoppedBeforeAndUsable(httplib::Client& http, const std::string& id,
                                  uint64_t max_context) {
  HttpReply s;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    s = GetJson(http, "/v1/sessions/" + id);
  } while (s.body.value("generating", true) && absl::Now() < deadline);
  EXPECT_FALSE(s.body["generating"].get<bool>()) << s.raw;
  EXPECT_LT(s.body["context_tokens"].get<uint64_t>(), max_context);
  HttpReply next = PostJson(http, "/v1/completions",
                            json{{"session_id", id}, {"prompt", "more"}, {"max_tokens", 4}}.dump());
  EXPECT_EQ(next.status, 200) << next.raw;
  EXPECT_EQ(next.body["usage"]["completion_tokens"], 4);
}

TEST_F(HttpTest, DisconnectMidStreamCancelsAndTheSessionStaysUsable) {
  const std::string id = NewSession(kLinear);
  EXPECT_GE(StreamThenDisconnect(server_->http_port(), id, 3), 3);
  // The loop sees the closed socket before its next step (http_peer_test checks that directly)
  // and ends the stream; the session stops generating long before max_tokens.
  ExpectStoppedBeforeAndUsable(*http_, id, 30000u);
}

// A client of a non-streamed completion that gives up (here: a 200 ms read timeout) closes its
// connection; nothing is written to it until the end, so only the socket watch can see it go.
TEST_F(HttpTest, NonStreamedClientThatLeavesCancelsItsGeneration) {
  const std::string id = NewSession(kLinear);
  {
    httplib::Client c("127.0.0.1", server_->http_port());
    c.set_read_timeout(0, 200000);
    const auto res = c.Post(
        "/v1/completions", json{{"session_id", id}, {"prompt", "go"}, {"max_tokens", 60000}}.dump(),
        "application/json");
    EXPECT_FALSE(res) << "finished 60000 tokens within the 200 ms timeout?";
  }
  ExpectStoppedBeforeAndUsable(*http_, id, 60000u);
}

TEST_F(HttpTest, BusySessionIs409) {
  const std::string id = NewSession(kLinear);
  std::atomic<bool> started{false}, checked{false};
  std::thread streamer([&] {
    httplib::Client c("127.0.0.1", server_->http_port());
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body =
        json{{"session_id", id}, {"prompt", "a"}, {"max_tokens", 60000}, {"stream", true}}.dump();
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      started = true;
      return !checked.load();  // streams until the 409 was seen, then disconnects
    };
    c.send(req);
  });
  // Waits for the stream with a deadline: a stream that never starts fails here, not at the
  // ctest timeout.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!started && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  if (!started) {
    checked = true;  // the receiver, should it ever run, disconnects at once
    streamer.join();
    FAIL() << "the streaming request did not start within 30 s";
  }
  ExpectError(Post("/v1/completions", {{"session_id", id}, {"prompt", "b"}}), 409, "");
  checked = true;
  streamer.join();
}

TEST(HttpLimits, AuthBodyLimitAndCapacity) {
  server::ServerOptions o = HttpTestOptions();
  o.auth_token = "s3cret";
  o.max_http_body_bytes = 4096;
  o.max_sessions = 1;
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  httplib::Client c("127.0.0.1", server->http_port());
  const httplib::Headers auth = {{"Authorization", "Bearer s3cret"}};
  const std::string body = json{{"prompt", "a"}, {"max_tokens", 2}}.dump();
  ExpectError(PostJson(c, "/v1/completions", body), 401, "");
  ExpectError(PostJson(c, "/v1/completions", body, {{"Authorization", "Bearer nope"}}), 401, "");
  ExpectError(GetJson(c, "/v1/models"), 401, "");
  EXPECT_EQ(GetJson(c, "/health").status, 200);  // open, like gRPC health
  EXPECT_EQ(PostJson(c, "/v1/completions", body, auth).status, 200);
  ExpectError(PostJson(c, "/v1/completions", json{{"prompt", std::string(8000, 'x')}}.dump(), auth),
              413, "body");
  // max_sessions = 1: the second session does not fit.
  EXPECT_EQ(PostJson(c, "/v1/sessions", "{}", auth).status, 200);
  ExpectError(PostJson(c, "/v1/sessions", "{}", auth), 429, "");
  server->Shutdown();
}

TEST(HttpLimits, KvPoolFullIs429) {
  server::ServerOptions o = HttpTestOptions();
  o.kv_blocks = 2;  // 32 tokens
  auto server = StartServer(o);
  ASSERT_NE(server, nullptr);
  httplib::Client c("127.0.0.1", server->http_port());
  ExpectError(PostJson(c, "/v1/completions",
                       json{{"model", kSoftmax}, {"prompt", std::string(100, 'k')}}.dump()),
              429, "");
}

TEST(HttpStatusMapping, EveryCode) {
  const std::pair<absl::Status, int> cases[] = {
      {absl::InvalidArgumentError("max_new_tokens must be > 0"), 400},
      {absl::OutOfRangeError("x"), 400},
      {absl::UnauthenticatedError("x"), 401},
      {absl::PermissionDeniedError("x"), 403},
      {absl::NotFoundError("session_id: session 'x' not found"), 404},
      {absl::FailedPreconditionError("session busy"), 409},
      {absl::AbortedError("x"), 409},
      {absl::ResourceExhaustedError("x"), 429},
      {absl::UnavailableError("x"), 503},
      {absl::InternalError("x"), 500},
      {absl::UnknownError("x"), 500},
      {absl::DataLossError("x"), 500},
  };
  for (const auto& [s, want] : cases) EXPECT_EQ(server::ToHttpError(s).http_status, want) << s;
  EXPECT_EQ(server::ToHttpError(absl::InvalidArgumentError("max_new_tokens must be > 0")).param,
            "max_new_tokens");
  EXPECT_EQ(server::ToHttpError(absl::NotFoundError("session_id: x")).param, "session_id");
  EXPECT_EQ(server::ToHttpError(absl::InternalError("prompt: x")).param, "");
}

TEST(HttpHealth, Is503WhileDraining) {
  auto server = StartServer(HttpTestOptions());
  ASSERT_NE(server, nullptr);
  httplib::Client c("127.0.0.1", server->http_port());
  EXPECT_EQ(GetJson(c, "/health").status, 200);
  std::thread stopper([&] { server->Shutdown(); });
  // Until the listener closes, /health answers 503; afterwards nothing answers.
  bool saw_503_or_closed = false;
  for (int i = 0; i < 200 && !saw_503_or_closed; ++i) {
    auto r = c.Get("/health");
    saw_503_or_closed = !r || r->status == 503;
  }
  stopper.join();
  EXPECT_TRUE(saw_503_or_closed);
}

}  // namespace
}  // namespace flatstate::testing
