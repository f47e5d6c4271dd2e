// The prefix cache through the HTTP API (engine.h, "Prefix cache"): a 10-turn conversation sent
// statelessly to /v1/completions (each turn resends the whole history) gets, from turn 2 on,
// everything up to the previous prompt's last grid point from the cache (usage.
// prompt_tokens_details.cached_tokens; GetStats and /metrics count it), the same bytes (text and
// log-probabilities) as a server without the cache, and the cache never holds more than
// --prefix_cache_bytes. For both kinds of the test models (linear_elu and softmax).
#include <string>
#include <vector>

#include "engine/runtime/step_plan.h"
#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

constexpr size_t kBudget = size_t{1} << 20;
constexpr int64_t kGrid = 16;  // SmallConfig: chunk 16, KV block 16

struct Turn {
  std::string text;
  json logprobs;
  int64_t prompt_tokens = 0, cached_tokens = 0;
};

class HttpPrefixCache : public ::testing::TestWithParam<const char*> {
 protected:
  static void SetUpTestSuite() {
    server::ServerOptions o = HttpTestOptions();
    o.prefix_cache_bytes = kBudget;
    cached_ = StartServer(o).release();
    o.prefix_cache_bytes = 0;
    plain_ = StartServer(o).release();
  }
  static void TearDownTestSuite() {
    delete cached_;
    delete plain_;
  }

  // Ten stateless turns against `s`; after each, checks the cache's bytes against the budget.
  static std::vector<Turn> Conversation(server::Server* s, const std::string& model) {
    httplib::Client http("127.0.0.1", s->http_port());
    http.set_read_timeout(60, 0);
    auto stub = Connect(s->port());
    std::vector<Turn> turns;
    std::string history;
    for (int i = 0; i < 10; ++i) {
      history += "User " + std::to_string(i) + ": " + std::string(20 + 7 * i, 'a' + i) + "\n";
      HttpReply r = PostJson(http, "/v1/completions",
                             json{{"model", model},
                                  {"prompt", history},
                                  {"max_tokens", 6},
                                  {"temperature", 0.8},
                                  {"seed", 100 + i},
                                  {"logprobs", 2}}
                                 .dump());
      EXPECT_EQ(r.status, 200) << r.raw;
      if (r.status != 200) break;
      Turn t;
      t.text = r.body["choices"][0]["text"];
      t.logprobs = r.body["choices"][0]["logprobs"];
      t.prompt_tokens = r.body["usage"]["prompt_tokens"];
      t.cached_tokens = r.body["usage"]["prompt_tokens_details"]["cached_tokens"];
      turns.push_back(t);
      history += t.text;
      grpc::ClientContext ctx;
      pb::ServerStats st;
      EXPECT_TRUE(stub->GetStats(&ctx, pb::GetStatsRequest(), &st).ok());
      EXPECT_LE(st.prefix_cache_bytes(), kBudget) << "turn " << i;
    }
    return turns;
  }

  inline static server::Server* cached_ = nullptr;
  inline static server::Server* plain_ = nullptr;
};

TEST_P(HttpPrefixCache, StatelessTurnsPrefillOnlyTheNewTokensWithTheSameOutput) {
  const std::string model = GetParam();
  auto stub = Connect(cached_->port());
  pb::ServerStats before;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetStats(&ctx, pb::GetStatsRequest(), &before).ok());
  }
  const std::vector<Turn> want = Conversation(plain_, model);
  const std::vector<Turn> got = Conversation(cached_, model);
  ASSERT_EQ(want.size(), 10u);
  ASSERT_EQ(got.size(), 10u);
  int64_t saved = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].text, want[i].text) << "turn " << i;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "turn " << i;  // doubles, digit for digit
    EXPECT_EQ(want[i].cached_tokens, 0);
    const int64_t expect = i == 0 ? 0 : LastGridPoint(got[i - 1].prompt_tokens, kGrid);
    EXPECT_EQ(got[i].cached_tokens, expect) << "turn " << i;
    // What is prefilled: the reply and message that are new, plus under one grid step.
    if (i > 0) {
      EXPECT_LT(got[i].prompt_tokens - got[i].cached_tokens,
                got[i].prompt_tokens - got[i - 1].prompt_tokens + kGrid);
    }
    saved += got[i].cached_tokens;
  }
  pb::ServerStats after;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub->GetStats(&ctx, pb::GetStatsRequest(), &after).ok());
  }
  EXPECT_EQ(after.prefix_cache_hits_total() - before.prefix_cache_hits_total(), 9u);
  EXPECT_EQ(after.prefix_cache_misses_total() - before.prefix_cache_misses_total(), 1u);
  EXPECT_EQ(after.prefix_cache_tokens_saved_total() - before.prefix_cache_tokens_saved_total(),
            static_cast<uint64_t>(saved));
  EXPECT_GT(after.prefix_cache_bytes(), 0u);
  EXPECT_GT(after.prefix_cache_entries(), 0u);
}

TEST_P(HttpPrefixCache, StreamedUsageCarriesCachedTokens) {
  const std::string model = GetParam();
  httplib::Client http("127.0.0.1", cached_->http_port());
  http.set_read_timeout(60, 0);
  const std::string prompt(100, 'z');
  for (int i = 0; i < 2; ++i) {
    HttpReply r = PostJson(http, "/v1/completions",
                           json{{"model", model},
                                {"prompt", prompt + std::string(i + 1, 'y')},
                                {"max_tokens", 2},
                                {"stream", true},
                                {"stream_options", {{"include_usage", true}}}}
                               .dump());
    ASSERT_EQ(r.status, 200) << r.raw;
    const SseBody sse = ParseSse(r.raw);
    ASSERT_TRUE(sse.done);
    ASSERT_FALSE(sse.events.empty());
    const json& usage = sse.events.back()["usage"];
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], i == 0 ? 0 : 96) << usage;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HttpPrefixCache, ::testing::Values(kLinear, kSoftmax),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param) == kLinear ? "linear" : "softmax";
                         });

}  // namespace
}  // namespace flatstate::testing
