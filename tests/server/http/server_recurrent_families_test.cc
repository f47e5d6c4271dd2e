// The pure recurrent Hugging Face families behind the HTTP API: copies of tests/data/
// hf_rwkv7_tiny (RWKV-7, its World vocabulary, RWKV's chat format as the architecture's default
// template) and tests/data/hf_mamba2_tiny (Mamba-2, token ids only) served side by side. Chat
// renders RWKV's format and a reply ends at its blank line; Mamba-2 completes token-id prompts,
// the same twice; both report their fixed state bytes; /v1/models lists them beside the Qwen3.5
// hybrid (tests/data/hf_qwen35_tiny) with each one's kind and K/V layers.
#include <filesystem>
#include <map>
#include <string>

#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

const std::string& FamiliesDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(TempDir() + "/recurrent_families");
    std::error_code ec;
    std::filesystem::remove_all(*d, ec);
    for (const char* name : {"rwkv7", "mamba2", "qwen35"}) {
      std::filesystem::create_directories(*d, ec);
      std::filesystem::copy(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_" + name + "_tiny",
                            *d + "/" + name + "-tiny", std::filesystem::copy_options::recursive,
                            ec);
      EXPECT_FALSE(ec) << ec.message();
    }
    return d;
  }();
  return *dir;
}

class RecurrentFamiliesApiTest : public HttpTest {
 protected:
  static void SetUpTestSuite() {
    server::ServerOptions o = HttpTestOptions();
    o.models_dir = FamiliesDir();
    o.default_model = "rwkv7-tiny";
    StartSuiteServer(o);
  }
};

TEST_F(RecurrentFamiliesApiTest, RwkvChatUsesItsFormatAndEndsAtABlankLine) {
  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "hello\n\nthere"}}};
  HttpReply r = Post("/apply-template", {{"model", "rwkv7-tiny"}, {"messages", messages}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["prompt"], "System: Be brief.\n\nUser: hello\nthere\n\nAssistant:");
  r = Post(
      "/v1/chat/completions",
      {{"model", "rwkv7-tiny"}, {"messages", messages}, {"max_tokens", 48}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const std::string text = r.body["choices"][0]["message"]["content"];
  EXPECT_EQ(text.find("\n\n"), std::string::npos) << text;  // the turn's end is a stop string
  EXPECT_GT(r.body["usage"]["prompt_tokens"].get<int>(), 10) << r.raw;
  // A session's whole memory: 2 layers x (2 x 32 x 32 + 2 x 64) floats, whatever the context.
  EXPECT_EQ(r.body["usage"]["state_bytes"], 17408) << r.raw;
  const std::string finish = r.body["choices"][0]["finish_reason"];
  EXPECT_TRUE(finish == "stop" || finish == "length") << finish;
}

TEST_F(RecurrentFamiliesApiTest, Mamba2CompletesTokenIdPromptsDeterministically) {
  const json req = {{"model", "mamba2-tiny"}, {"prompt", {1, 17, 230, 45, 99, 310, 7}},
                    {"max_tokens", 8},        {"temperature", 0},
                    {"ignore_eos", true},     {"logprobs", 1}};
  HttpReply a = Post("/v1/completions", req);
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.body["usage"]["prompt_tokens"], 7) << a.raw;
  EXPECT_EQ(a.body["usage"]["completion_tokens"], 8) << a.raw;
  EXPECT_EQ(a.body["usage"]["state_bytes"], 15360) << a.raw;  // 2 x (6 x 16 x 16 + 3 x 128) x 4
  HttpReply b = Post("/v1/completions", req);
  ASSERT_EQ(b.status, 200) << b.raw;
  EXPECT_EQ(a.body["choices"], b.body["choices"]);
}

// /v1/models says what a session of each model costs: the recurrent families keep no K/V (their
// whole memory is state_bytes_per_session), the Qwen3.5 hybrid keeps K/V in its one full-attention
// layer of four (kv_bytes_per_token = 2 x 1 layer x 1 K/V head x 32 x 4 B).
TEST_F(RecurrentFamiliesApiTest, ModelsListTheFamiliesWithTheirKinds) {
  HttpReply r = GetJson(*http_, "/v1/models");
  ASSERT_EQ(r.status, 200) << r.raw;
  std::map<std::string, json> by_id;
  for (const json& m : r.body["data"]) by_id[m.value("id", "")] = m;
  ASSERT_EQ(by_id.size(), 3u) << r.raw;
  for (const char* id : {"rwkv7-tiny", "mamba2-tiny"}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(by_id[id]["attention_kind"], "recurrent");
    EXPECT_EQ(by_id[id]["num_kv_layers"], 0);
    EXPECT_EQ(by_id[id]["kv_bytes_per_token"], 0);
    EXPECT_GT(by_id[id]["state_bytes_per_session"].get<int64_t>(), 0);
  }
  EXPECT_EQ(by_id["rwkv7-tiny"]["architecture"], "rwkv7");
  EXPECT_EQ(by_id["mamba2-tiny"]["architecture"], "mamba2");
  const json& q = by_id["qwen35-tiny"];
  EXPECT_EQ(q["attention_kind"], "hybrid") << q.dump();
  EXPECT_EQ(q["architecture"], "qwen3_5") << q.dump();
  EXPECT_EQ(q["num_layers"], 4);
  EXPECT_EQ(q["num_kv_layers"], 1);
  EXPECT_EQ(q["kv_bytes_per_token"], 2 * 1 * 1 * 32 * 4) << q.dump();
  EXPECT_GT(q["state_bytes_per_session"].get<int64_t>(), 0);
}

}  // namespace
}  // namespace flatstate::testing
