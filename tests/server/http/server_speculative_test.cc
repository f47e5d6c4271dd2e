// Speculative decoding with prompt lookup through the server (docs/speculative.md): on the
// shipped models (a trained softmax, linear and Gated DeltaNet model, whose greedy output falls
// into loops that prompt lookup drafts well), a request with `speculative` gives the same tokens,
// text and finish reason as without, greedy and sampled, whole and streamed, over HTTP and gRPC,
// while drafts are accepted (the metrics move); a session that speculated continues its next
// turn exactly as one that did not; bad speculative fields are 400 / INVALID_ARGUMENT naming
// them. Drafting unpaced here (every decoding step drafts), so that drafts happen whatever the
// machine's load. With --draft_model, drafts come from that model and the output is the same again;
// paced by their measured cost (--pace_drafts, the default), a draft model as dear as its target
// drafts only probes.
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

constexpr const char* kModels[] = {"shakespeare-softmax", "shakespeare-linear-elu",
                                   "shakespeare-gated-deltanet"};

// Where each model's greedy reply to kPrompt is stopped in a persistent-session turn: text well
// into the reply, after drafts were accepted.
constexpr std::pair<const char*, const char*> kStops[] = {
    {"shakespeare-softmax", "shallesses"},
    {"shakespeare-linear-elu", "the shall the shall the shall the shall the shall"},
    {"shakespeare-gated-deltanet", "And there is the state and"}};

// The first lines of a speech, twice: the second time through, prompt lookup has something to
// copy even before the model loops.
const std::string kPrompt =
    "ROMEO:\nBut soft, what light through yonder window breaks?\nIt is the east, and Juliet is "
    "the sun.\nROMEO:\nBut soft, what light through yonder window breaks?\nIt is the";

class SpeculativeTest : public HttpTest {
 protected:
  static void SetUpTestSuite() { StartSuiteServer(Options()); }

  // A models_dir with the three models, metrics on a free port.
  static server::ServerOptions Options() {
    const std::string dir = TempDir() + "/speculative-models";
    std::filesystem::create_directories(dir);
    for (const char* m : kModels) {
      const std::string link = dir + "/" + m;
      if (!std::filesystem::exists(link)) {
        std::filesystem::create_directory_symlink(
            std::string(FLATSTATE_SOURCE_DIR) + "/models/" + m, link);
      }
    }
    server::ServerOptions o = HttpTestOptions();
    o.models_dir = dir;
    o.metrics_any_port = true;
    o.metrics_host = "127.0.0.1";
    // Every decoding step drafts (--nopace_drafts): these tests are about exact verification and
    // roll-back, and paced drafting follows measured step times, so on a loaded machine a turn
    // could end with every draft paused (the stop-string turn did, 2 runs in 5, beside a CI run).
    // The pacer is tested on its own (tests/engine/speculate/) and by PacedDraftModelTest.
    o.pace_drafts = false;
    return o;
  }

  // POSTs `body` (speculative) and the same without "speculative" and expects the same tokens,
  // text, finish reason and usage (but for the prefix cache's hit: the plain request's prompt is
  // cached; context and state bytes included). The plain choice in *plain; the drafted and
  // accepted counters' growth over the speculative request.
  std::pair<double, double> ExpectSameAsPlain(const json& body, json* plain) {
    json without = body;
    without.erase("speculative");
    without.erase("max_draft_tokens");
    HttpReply p = Post("/v1/completions", without);
    EXPECT_EQ(p.status, 200) << p.raw;
    const auto [d_before, a_before] = DraftCounters();
    HttpReply s = Post("/v1/completions", body);
    EXPECT_EQ(s.status, 200) << s.raw;
    const auto [d_after, a_after] = DraftCounters();
    if (p.status != 200 || s.status != 200) return {0, 0};
    *plain = p.body["choices"][0];
    const json& got = s.body["choices"][0];
    EXPECT_EQ(got["token_ids"], (*plain)["token_ids"]);
    EXPECT_EQ(got["text"], (*plain)["text"]);
    EXPECT_EQ(got["finish_reason"], (*plain)["finish_reason"]);
    json usage = s.body["usage"], plain_usage = p.body["usage"];
    usage.erase("prompt_tokens_details");
    plain_usage.erase("prompt_tokens_details");
    EXPECT_EQ(usage, plain_usage);
    return {d_after - d_before, a_after - a_before};
  }

  // flatstate_draft_tokens{,_accepted}_total from /metrics.
  std::pair<double, double> DraftCounters() {
    httplib::Client m("127.0.0.1", server_->metrics_port());
    auto res = m.Get("/metrics");
    EXPECT_TRUE(res);
    double drafted = -1, accepted = -1;
    if (!res) return {drafted, accepted};
    for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
      std::vector<std::string> kv = absl::StrSplit(line, ' ');
      if (kv.size() != 2) continue;
      if (kv[0] == "flatstate_draft_tokens_total") drafted = std::stod(kv[1]);
      if (kv[0] == "flatstate_draft_tokens_accepted_total") accepted = std::stod(kv[1]);
    }
    return {drafted, accepted};
  }
};

// The same server with --draft_model draft-twin, a second copy of the Gated DeltaNet model: every
// model drafts with it (the same 256-token vocabulary), and the Gated DeltaNet model's greedy
// drafts are then its own choices. --nopace_drafts: every decoding step drafts, whatever it costs
// (a draft model as large as its target never pays; PacedDraftModelTest).
class DraftModelTest : public SpeculativeTest {
 protected:
  static void SetUpTestSuite() { StartWithTwin(/*pace_drafts=*/false); }
  static void StartWithTwin(bool pace_drafts) {
    server::ServerOptions o = Options();
    const std::string twin = o.models_dir + "/draft-twin";
    if (!std::filesystem::exists(twin)) {
      std::filesystem::create_directory_symlink(
          std::string(FLATSTATE_SOURCE_DIR) + "/models/shakespeare-gated-deltanet", twin);
    }
    o.draft_model = "draft-twin";
    o.pace_drafts = pace_drafts;
    StartSuiteServer(o);
  }
  static void TearDownTestSuite() {
    SpeculativeTest::TearDownTestSuite();
    std::filesystem::remove(TempDir() + "/speculative-models/draft-twin");  // not SpeculativeTest's
  }
};

// The twin with drafts paced by their measured cost (the default): drafting a token costs the
// twin a decode step as dear as the target's, so no draft can pay and the pacer keeps to probes.
class PacedDraftModelTest : public DraftModelTest {
 protected:
  static void SetUpTestSuite() { StartWithTwin(/*pace_drafts=*/true); }
};

json Body(const std::string& model, double temperature, std::optional<bool> speculative) {
  json b = {{"model", model},     {"prompt", kPrompt}, {"max_tokens", 160},
            {"temperature", temperature}, {"seed", 7}, {"return_token_ids", true}};
  if (speculative.has_value()) b["speculative"] = *speculative;
  return b;
}

TEST_F(SpeculativeTest, SameOutputAsWithoutAndDraftsAreAccepted) {
  const auto [drafted0, accepted0] = DraftCounters();
  for (const char* model : kModels) {
    for (double temperature : {0.0, 0.8}) {
      SCOPED_TRACE(std::string(model) + " temperature " + std::to_string(temperature));
      json body = Body(model, temperature, true);
      body["max_draft_tokens"] = 6;
      json plain;
      const auto [drafted, accepted] = ExpectSameAsPlain(body, &plain);
      if (temperature == 0.0) {
        EXPECT_GT(accepted, 0) << "no draft accepted on a greedy loop";
      }
      // Streamed: the same text, chunk by chunk.
      body["stream"] = true;
      HttpReply streamed = Post("/v1/completions", body);
      ASSERT_EQ(streamed.status, 200);
      const SseBody sse = ParseSse(streamed.raw);
      ASSERT_TRUE(sse.well_formed && sse.done) << streamed.raw;
      std::string text;
      for (const json& ev : sse.events) {
        if (!ev["choices"].empty()) text += ev["choices"][0].value("text", "");
      }
      EXPECT_EQ(text, plain["text"]);
    }
  }
  const auto [drafted1, accepted1] = DraftCounters();
  EXPECT_GT(drafted1, drafted0);
  EXPECT_GT(accepted1, accepted0);
  EXPECT_LE(accepted1 - accepted0, drafted1 - drafted0);
}

TEST_F(SpeculativeTest, GrpcSpeculatesToTheSameTokens) {
  for (const char* model : kModels) {
    pb::GenerateRequest req = GenRequest(model, kPrompt, 120, 0.7f, 3);
    const StreamResult plain = RunGenerate(stub_.get(), req);
    ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
    req.set_speculative(true);
    req.set_max_draft_tokens(8);
    const StreamResult spec = RunGenerate(stub_.get(), req);
    ASSERT_TRUE(spec.status.ok()) << spec.status.error_message();
    EXPECT_EQ(spec.tokens, plain.tokens) << model;
    EXPECT_EQ(spec.text, plain.text) << model;
    EXPECT_EQ(spec.last.finish_reason(), plain.last.finish_reason());
  }
}

TEST_F(SpeculativeTest, ASessionThatSpeculatedContinuesExactly) {
  for (const char* model : kModels) {
    std::vector<json> second;
    for (bool speculative : {false, true}) {
      const std::string id = NewSession(model);
      json turn = {{"model", model}, {"session_id", id}, {"prompt", kPrompt},
                   {"max_tokens", 90}, {"speculative", speculative}, {"return_token_ids", true}};
      HttpReply a = Post("/v1/completions", turn);
      ASSERT_EQ(a.status, 200) << a.raw;
      json next = {{"session_id", id}, {"prompt", "\nJULIET:\n"}, {"max_tokens", 60},
                   {"return_token_ids", true}};
      HttpReply b = Post("/v1/completions", next);
      ASSERT_EQ(b.status, 200) << b.raw;
      second.push_back(b.body["choices"][0]["token_ids"]);
      EXPECT_EQ(b.body["usage"]["prompt_tokens"], 9);
    }
    EXPECT_EQ(second[0], second[1]) << model;
  }
}

// A session that lives on, with a stop string the models' loops reach: drafts are cut before the
// stop (StreamText::TokensBeforeStop), so the turn speculates, ends at the same token with the
// same text, and the session's next turn is the same as without speculation.
TEST_F(SpeculativeTest, ASessionWithAStopStringSpeculatesAndEndsAtTheStop) {
  for (const auto& [model, stop] : kStops) {
    std::vector<json> first, second;
    for (bool speculative : {false, true}) {
      const std::string id = NewSession(model);
      const auto [d_before, a_before] = DraftCounters();
      json turn = {{"model", model},
                   {"session_id", id},
                   {"prompt", kPrompt},
                   {"max_tokens", 200},
                   {"stop", {stop}},
                   {"temperature", 0},
                   {"speculative", speculative},
                   {"return_token_ids", true}};
      HttpReply a = Post("/v1/completions", turn);
      ASSERT_EQ(a.status, 200) << a.raw;
      const auto [d_after, a_after] = DraftCounters();
      EXPECT_EQ(a.body["choices"][0]["finish_reason"], "stop") << model << ": " << a.raw;
      if (speculative) {
        EXPECT_GT(a_after, a_before) << model << ": no draft accepted";
      }
      json usage = a.body["usage"];  // context_tokens: where the session ended
      usage.erase("prompt_tokens_details");
      first.push_back({a.body["choices"][0], usage});
      json next = {{"session_id", id}, {"prompt", "\nJULIET:\n"}, {"max_tokens", 60},
                   {"return_token_ids", true}};
      HttpReply b = Post("/v1/completions", next);
      ASSERT_EQ(b.status, 200) << b.raw;
      second.push_back({b.body["choices"][0]["token_ids"], b.body["usage"]["context_tokens"]});
    }
    EXPECT_EQ(first[0], first[1]) << model;
    EXPECT_EQ(second[0], second[1]) << model;
  }
}

TEST_F(SpeculativeTest, BadFieldsAreRefusedByName) {
  for (const json& bad : {json{{"max_draft_tokens", 0}}, json{{"max_draft_tokens", 33}},
                          json{{"max_draft_tokens", "8"}}, json{{"speculative", "yes"}}}) {
    json body = Body(kModels[0], 0.0, std::nullopt);
    body.update(bad);
    HttpReply r = Post("/v1/completions", body);
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_NE(r.raw.find(bad.begin().key()), std::string::npos) << r.raw;
  }
  pb::GenerateRequest req = GenRequest(kModels[0], kPrompt, 4);
  req.set_max_draft_tokens(40);
  const StreamResult r = RunGenerate(stub_.get(), req);
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status.error_message().find("max_draft_tokens"), std::string::npos)
      << r.status.error_message();
}

TEST_F(DraftModelTest, DraftsFromTheDraftModelGiveTheSameOutput) {
  for (const char* model : kModels) {
    for (double temperature : {0.0, 0.8}) {
      SCOPED_TRACE(std::string(model) + " temperature " + std::to_string(temperature));
      json plain;
      const auto [drafted, accepted] = ExpectSameAsPlain(Body(model, temperature, true), &plain);
      EXPECT_GT(drafted, 0) << "nothing drafted";
      if (temperature == 0.0) {
        EXPECT_GT(accepted, 0) << "no draft accepted";
      }
      if (temperature == 0.0 && std::string(model) == "shakespeare-gated-deltanet") {
        // Its own weights draft: nearly all kept (prompt lookup keeps about two thirds here).
        EXPECT_GE(accepted, 0.9 * drafted);
        EXPECT_GE(drafted, 100);
      }
    }
  }
  // n > 1 choices clone the draft session: each choice as its own request.
  json body = Body(kModels[2], 0.8, true);
  body["n"] = 3;
  HttpReply three = Post("/v1/completions", body);
  ASSERT_EQ(three.status, 200) << three.raw;
  ASSERT_EQ(three.body["choices"].size(), 3u);
  body["n"] = 1;
  body["speculative"] = false;
  HttpReply one = Post("/v1/completions", body);
  ASSERT_EQ(one.status, 200) << one.raw;
  EXPECT_EQ(three.body["choices"][0]["token_ids"], one.body["choices"][0]["token_ids"]);
}

TEST_F(PacedDraftModelTest, ADraftModelAsDearAsTheTargetKeepsToProbes) {
  json plain;
  const auto [drafted, accepted] =
      ExpectSameAsPlain(Body("shakespeare-gated-deltanet", 0.0, true), &plain);
  // Unpaced, the same request drafts >= 100 tokens (DraftModelTest): 5 a step, nearly all kept.
  // Paced: the prior's first draft, then a probe after pauses of 1, 2, 4, ... steps.
  EXPECT_GT(drafted, 0);
  EXPECT_LE(drafted, 50) << "the pacer did not count the draft model's own steps";
  EXPECT_GE(accepted, 0.9 * drafted);
}

TEST(DraftModelOption, AModelThatIsNotLoadedIsRefusedByName) {
  server::ServerOptions o = HttpTestOptions();
  o.models_dir = std::string(FLATSTATE_SOURCE_DIR) + "/models";
  o.draft_model = "no-such-model";
  absl::StatusOr<std::unique_ptr<server::Server>> s = server::Server::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("draft_model"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("no-such-model"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace flatstate::testing
