// HttpTest, the fixture of the HTTP API tests (server_http_*_test.cc): one in-process Server on
// TestOptions() with the HTTP API on a free loopback port (http_any_port), shared by the tests of
// a process, a gRPC stub and an httplib client per test, and helpers that post JSON and split a
// server-sent-event body into its events. Test-only; not thread-safe. Failures are gtest
// failures.
#ifndef FLATSTATE_TESTS_SERVER_HTTP_TEST_UTIL_H_
#define FLATSTATE_TESTS_SERVER_HTTP_TEST_UTIL_H_

#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/server/server_test_util.h"

namespace flatstate::testing {

using json = nlohmann::json;

inline server::ServerOptions HttpTestOptions() {
  server::ServerOptions o = TestOptions();
  o.http_any_port = true;
  return o;
}

struct HttpReply {
  int status = 0;
  json body;        // parsed (null when the body is not JSON)
  std::string raw;  // as received
};

inline HttpReply ReplyOf(const httplib::Result& res, const std::string& path) {
  HttpReply r;
  EXPECT_TRUE(res) << "no response for " << path;
  if (!res) return r;
  r.status = res->status;
  r.raw = res->body;
  r.body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  return r;
}

inline HttpReply PostJson(httplib::Client& c, const std::string& path, const std::string& body,
                          const httplib::Headers& headers = {}) {
  return ReplyOf(c.Post(path.c_str(), headers, body, "application/json"), path);
}

inline HttpReply GetJson(httplib::Client& c, const std::string& path,
                         const httplib::Headers& headers = {}) {
  return ReplyOf(c.Get(path.c_str(), headers), path);
}

// The events of an SSE body: each "data: X\n\n" as parsed JSON; `done` when the last one was
// "data: [DONE]"; `well_formed` when every event had that shape (comments ": ..." allowed).
struct SseBody {
  std::vector<json> events;
  bool done = false;
  bool well_formed = true;
};

inline SseBody ParseSse(const std::string& body) {
  SseBody s;
  for (absl::string_view ev : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (absl::StartsWith(ev, ":")) continue;
    if (!absl::StartsWith(ev, "data: ") || s.done) {
      s.well_formed = false;
      continue;
    }
    ev.remove_prefix(6);
    if (ev == "[DONE]") {
      s.done = true;
      continue;
    }
    json j = json::parse(ev, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) s.well_formed = false;
    s.events.push_back(std::move(j));
  }
  if (!absl::EndsWith(body, "\n\n")) s.well_formed = false;
  return s;
}

class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { StartSuiteServer(HttpTestOptions()); }
  // Starts the suite's server with `o`: a fixture that needs other models derives from HttpTest
  // and calls this from its own SetUpTestSuite.
  static void StartSuiteServer(const server::ServerOptions& o) {
    server_ = StartServer(o).release();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->http_port(), 0);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    http_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    http_->set_read_timeout(60, 0);
    stub_ = Connect(server_->port());
  }
  HttpReply Post(const std::string& path, const json& body) {
    return PostJson(*http_, path, body.dump());
  }
  // POST /v1/sessions for `model`; its id.
  std::string NewSession(const std::string& model) {
    HttpReply r = Post("/v1/sessions", {{"model", model}});
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body.value("id", "");
  }

  inline static server::Server* server_ = nullptr;
  std::unique_ptr<httplib::Client> http_;
  std::unique_ptr<pb::Inference::Stub> stub_;
};

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_SERVER_HTTP_TEST_UTIL_H_
