// n > 1 choices and session forks over HTTP (docs/http-api.md): choice i of a request with seed s
// is the same tokens and text as a request of its own with seed s + i (the prompt prefilled once,
// then forked: EngineLoop::GenerateChoices), whole and streamed, completions and chat, on a linear
// and a softmax model; POST /v1/sessions/{id}/fork branches a session that continues exactly as
// the original; a stateless request with initial_state starts from a stored checkpoint exactly as
// the session it was taken from continues; bad `n`, fork and initial_state requests are 400 / 404
// / 409 naming the problem.
#include <map>
#include <string>
#include <vector>

#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

using ChoicesTest = HttpTest;

// 148 bytes (byte-level models: 148 tokens): the prompt crosses the 64-token chunk grid twice
// before its last part, where the choices fork.
const std::string kPrompt =
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the "
    "slings and arrows of outrageous fortune, or to take arms ag";

json Body(const std::string& model, int n, uint64_t seed) {
  return {{"model", model},       {"prompt", kPrompt}, {"max_tokens", 12},
          {"temperature", 0.9},   {"seed", seed},      {"n", n},
          {"return_token_ids", true}};
}

TEST_F(ChoicesTest, EachChoiceIsTheRequestWithItsOwnSeed) {
  for (const char* model : {kLinear, kSoftmax}) {
    HttpReply r = Post("/v1/completions", Body(model, 4, 10));
    ASSERT_EQ(r.status, 200) << r.raw;
    ASSERT_EQ(r.body["choices"].size(), 4u) << r.raw;
    uint64_t completion = 0;
    for (int i = 0; i < 4; ++i) {
      const json& c = r.body["choices"][i];
      EXPECT_EQ(c["index"], i);
      HttpReply alone = Post("/v1/completions", Body(model, 1, 10 + i));
      ASSERT_EQ(alone.status, 200) << alone.raw;
      EXPECT_EQ(c["token_ids"], alone.body["choices"][0]["token_ids"]) << model << " choice " << i;
      EXPECT_EQ(c["text"], alone.body["choices"][0]["text"]) << model << " choice " << i;
      EXPECT_EQ(c["finish_reason"], alone.body["choices"][0]["finish_reason"]);
      completion += c["token_ids"].size();
    }
    // The prompt counts once; the completions of every choice add up.
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], kPrompt.size());
    EXPECT_EQ(r.body["usage"]["completion_tokens"], completion);
    EXPECT_EQ(r.body["usage"]["total_tokens"], kPrompt.size() + completion);
    // Different seeds give different choices on a hot sampler (not all four the same).
    EXPECT_NE(r.body["choices"][0]["token_ids"], r.body["choices"][1]["token_ids"]) << model;
  }
}

TEST_F(ChoicesTest, StreamedChoicesCarryTheirIndexAndEqualTheWholeOnes) {
  for (bool chat : {false, true}) {
    json body = Body(kLinear, 3, 21);
    if (chat) {
      body.erase("prompt");
      body["messages"] = {{{"role", "user"}, {"content", kPrompt}}};
    }
    const std::string route = chat ? "/v1/chat/completions" : "/v1/completions";
    HttpReply whole = Post(route, body);
    ASSERT_EQ(whole.status, 200) << whole.raw;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    HttpReply streamed = Post(route, body);
    ASSERT_EQ(streamed.status, 200) << streamed.raw;
    const SseBody sse = ParseSse(streamed.raw);
    ASSERT_TRUE(sse.well_formed && sse.done) << streamed.raw;
    std::map<int, std::string> text;
    std::map<int, std::vector<int32_t>> ids;
    std::map<int, int> finishes;
    for (const json& ev : sse.events) {
      if (ev["choices"].empty()) {  // the usage chunk
        EXPECT_EQ(ev["usage"]["completion_tokens"], whole.body["usage"]["completion_tokens"]);
        continue;
      }
      const json& c = ev["choices"][0];
      const int i = c["index"];
      text[i] += chat ? c["delta"].value("content", "") : c["text"].get<std::string>();
      if (c.contains("token_ids")) {
        for (int32_t id : c["token_ids"]) ids[i].push_back(id);
      }
      if (!c["finish_reason"].is_null()) ++finishes[i];
    }
    for (int i = 0; i < 3; ++i) {
      const json& w = whole.body["choices"][i];
      EXPECT_EQ(text[i], chat ? w["message"]["content"] : w["text"]) << "choice " << i;
      EXPECT_EQ(json(ids[i]), w["token_ids"]) << "choice " << i;
      EXPECT_EQ(finishes[i], 1) << "choice " << i;
    }
  }
}

TEST_F(ChoicesTest, BadNIsA400NamingIt) {
  for (int n : {0, -1, 17}) {
    HttpReply r = Post("/v1/completions", Body(kLinear, n, 1));
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_EQ(r.body["error"]["param"], "n") << r.raw;
  }
  const std::string id = NewSession(kLinear);
  json body = Body(kLinear, 2, 1);
  body["session_id"] = id;
  HttpReply r = Post("/v1/completions", body);
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["param"], "n") << r.raw;
  EXPECT_NE(r.raw.find("fork"), std::string::npos) << r.raw;
}

TEST_F(ChoicesTest, ForkedSessionsContinueExactlyAsTheOriginal) {
  for (const char* model : {kLinear, kSoftmax}) {
    const std::string id = NewSession(model);
    json turn = {{"model", model}, {"session_id", id}, {"prompt", kPrompt},
                 {"max_tokens", 6}, {"temperature", 0.8}, {"seed", 4}};
    ASSERT_EQ(Post("/v1/completions", turn).status, 200);
    HttpReply f = Post("/v1/sessions/" + id + "/fork", json::object());
    ASSERT_EQ(f.status, 200) << f.raw;
    const std::string fork = f.body["session_id"];
    EXPECT_NE(fork, id);
    EXPECT_EQ(f.body["context_tokens"], kPrompt.size() + 6) << f.raw;
    json next = {{"session_id", id}, {"prompt", " and"}, {"max_tokens", 10}};
    HttpReply a = Post("/v1/completions", next);
    next["session_id"] = fork;
    HttpReply b = Post("/v1/completions", next);
    ASSERT_EQ(a.status, 200) << a.raw;
    ASSERT_EQ(b.status, 200) << b.raw;
    EXPECT_EQ(a.body["choices"][0]["text"], b.body["choices"][0]["text"]) << model;
    // A fork with its own sampling params; errors.
    HttpReply g = Post("/v1/sessions/" + id + "/fork", {{"temperature", 1.3}, {"seed", 9}});
    EXPECT_EQ(g.status, 200) << g.raw;
    HttpReply bad = Post("/v1/sessions/" + id + "/fork", {{"model", model}});
    EXPECT_EQ(bad.status, 400) << bad.raw;
    EXPECT_EQ(bad.body["error"]["param"], "model") << bad.raw;
    HttpReply neg = Post("/v1/sessions/" + id + "/fork", {{"temperature", -2}});
    EXPECT_EQ(neg.status, 400) << neg.raw;
    HttpReply missing = Post("/v1/sessions/" + std::string(32, 'b') + "/fork", json::object());
    EXPECT_EQ(missing.status, 404) << missing.raw;
  }
}

TEST_F(ChoicesTest, RequestsStartFromAStoredStateExactly) {
  for (const char* model : {kLinear, kSoftmax}) {
    const std::string id = NewSession(model);
    json turn = {{"model", model}, {"session_id", id}, {"prompt", kPrompt},
                 {"max_tokens", 4}, {"temperature", 0.8}, {"seed", 4}};
    ASSERT_EQ(Post("/v1/completions", turn).status, 200);
    HttpReply ck = Post("/v1/sessions/" + id + "/checkpoint", json::object());
    ASSERT_EQ(ck.status, 200) << ck.raw;
    const std::string state = ck.body["checkpoint_id"];
    // Without sampling params the checkpoint's sampler and RNG go on: the session's own next turn.
    HttpReply a = Post("/v1/completions", {{"session_id", id}, {"prompt", " and"},
                                           {"max_tokens", 10}, {"return_token_ids", true}});
    ASSERT_EQ(a.status, 200) << a.raw;
    for (int twice = 0; twice < 2; ++twice) {  // the stored state is not used up
      HttpReply b = Post("/v1/completions", {{"model", model}, {"initial_state", state},
                                             {"prompt", " and"}, {"max_tokens", 10},
                                             {"return_token_ids", true}});
      ASSERT_EQ(b.status, 200) << b.raw;
      EXPECT_EQ(b.body["choices"][0]["token_ids"], a.body["choices"][0]["token_ids"]) << model;
      EXPECT_EQ(b.body["usage"]["context_tokens"], kPrompt.size() + 4 + 4 + 10) << b.raw;
    }
    // With n and a seed: choice i is the request of its own with seed + i, from the same state.
    json from = {{"model", model}, {"initial_state", state}, {"prompt", " and"},
                 {"max_tokens", 8}, {"temperature", 0.9}, {"seed", 30},
                 {"return_token_ids", true}};
    json both = from;
    both["n"] = 2;
    HttpReply c = Post("/v1/completions", both);
    ASSERT_EQ(c.status, 200) << c.raw;
    for (int i = 0; i < 2; ++i) {
      from["seed"] = 30 + i;
      HttpReply one = Post("/v1/completions", from);
      ASSERT_EQ(one.status, 200) << one.raw;
      EXPECT_EQ(c.body["choices"][i]["token_ids"], one.body["choices"][0]["token_ids"]) << i;
    }
    // Errors name initial_state.
    const std::string other = model == std::string(kLinear) ? kSoftmax : kLinear;
    struct Bad {
      json body;
      int status;
    };
    for (const Bad& bad : {Bad{{{"initial_state", state}, {"session_id", id}, {"prompt", "x"}}, 400},
                           Bad{{{"initial_state", "zz"}, {"prompt", "x"}}, 400},
                           Bad{{{"initial_state", std::string(32, 'c')}, {"prompt", "x"}}, 404},
                           Bad{{{"model", other}, {"initial_state", state}, {"prompt", "x"}}, 409}}) {
      json body = bad.body;
      body["max_tokens"] = 2;
      HttpReply r = Post("/v1/completions", body);
      EXPECT_EQ(r.status, bad.status) << body.dump() << " " << r.raw;
      EXPECT_EQ(r.body["error"]["param"], "initial_state") << r.raw;
    }
  }
}

}  // namespace
}  // namespace flatstate::testing
