// The pure recurrent Hugging Face families behind the HTTP API: copies of tests/data/
// hf_rwkv7_tiny (RWKV-7, its World vocabulary, RWKV's chat format as the architecture's default
// template) and tests/data/hf_mamba2_tiny (Mamba-2, token ids only) served side by side. Chat
// renders RWKV's format and a reply ends at its blank line; Mamba-2 completes token-id prompts,
// the same twice; both report their fixed state bytes and are listed in /v1/models.
#include <filesystem>
#include <string>

#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

const std::string& FamiliesDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(TempDir() + "/recurrent_families");
    std::error_code ec;
    std::filesystem::remove_all(*d, ec);
    for (const char* name : {"rwkv7", "mamba2"}) {
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

TEST_F(RecurrentFamiliesApiTest, ModelsListBothFamilies) {
  HttpReply r = GetJson(*http_, "/v1/models");
  ASSERT_EQ(r.status, 200) << r.raw;
  std::string ids;
  for (const json& m : r.body["data"]) ids += m.value("id", "") + " ";
  EXPECT_NE(ids.find("rwkv7-tiny"), std::string::npos) << r.raw;
  EXPECT_NE(ids.find("mamba2-tiny"), std::string::npos) << r.raw;
}

}  // namespace
}  // namespace flatstate::testing
