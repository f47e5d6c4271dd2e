// The model's tokenizer through the APIs (in-process server, a byte-level model and the Hugging
// Face Llama folder tests/data/hf_llama_tiny, which has no tokenizer.json, only a tokenizer.model
// that flatstate does not read): POST
// /tokenize, /detokenize and /apply-template; token-id prompts on both APIs for both models; a
// text prompt, a stop string and a chat to the Llama model refused naming the field; logprobs with
// token ids and bytes; generated ids on HTTP (token_ids).
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/http/chat_format.h"
#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

constexpr char kLlama[] = "tiny-llama";

// <tmp>/tok_models: tiny-linear-elu (random, byte-level) and tiny-llama (a copy of the HF folder).
const std::string& TokModelsDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(TempDir() + "/tok_models");
    EXPECT_TRUE(
        WriteRandomModel(*d + "/" + kLinear, SmallConfig(AttentionKind::kLinearElu), 11).ok());
    std::error_code ec;
    std::filesystem::copy(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_llama_tiny",
                          *d + "/" + kLlama,
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::overwrite_existing,
                          ec);
    EXPECT_FALSE(ec) << ec.message();
    return d;
  }();
  return *dir;
}

class TokenizerApiTest : public HttpTest {
 protected:
  static void SetUpTestSuite() {
    server::ServerOptions o = HttpTestOptions();
    o.models_dir = TokModelsDir();
    o.default_model = kLinear;
    StartSuiteServer(o);
  }
  static void ExpectError(const HttpReply& r, int status, const std::string& param,
                          const std::string& message_part) {
    EXPECT_EQ(r.status, status) << r.raw;
    EXPECT_EQ(r.body["error"]["param"], param) << r.raw;
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find(message_part), std::string::npos)
        << r.raw;
  }
};

TEST_F(TokenizerApiTest, ModelsListVocabAndTokenizer) {
  HttpReply m = GetJson(*http_, "/v1/models");
  ASSERT_EQ(m.status, 200) << m.raw;
  ASSERT_EQ(m.body["data"].size(), 2u);
  for (const json& d : m.body["data"]) {
    if (d["id"] == kLlama) {
      EXPECT_EQ(d["vocab_size"], 512);
      EXPECT_EQ(d["tokenizer"], "ids-only");
    } else {
      EXPECT_EQ(d["vocab_size"], 256);
      EXPECT_EQ(d["tokenizer"], "bytes");
    }
  }
}

TEST_F(TokenizerApiTest, TokenizeAndDetokenizeBytes) {
  HttpReply r = Post("/tokenize", {{"content", "h\xC3\xA9"}});  // default model
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body, json::parse(R"({"tokens": [104, 195, 169]})"));
  r = Post("/tokenize", {{"model", kLinear},
                         {"content", "h\xC3\xA9"},
                         {"with_pieces", true},
                         {"add_special", true}});  // no BOS in a byte-level model
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body, json::parse(R"({"tokens": [{"id": 104, "piece": "h"},
                                                {"id": 195, "piece": [195]},
                                                {"id": 169, "piece": [169]}]})"));
  r = Post("/detokenize", {{"model", kLinear}, {"tokens", {104, 195, 169}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["content"], "h\xC3\xA9");
  r = Post("/detokenize", {{"tokens", {104, 195}}});  // a cut character: U+FFFD
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["content"], "h\xEF\xBF\xBD");
}

TEST_F(TokenizerApiTest, TokenizerEndpointErrorsNameTheField) {
  ExpectError(Post("/tokenize", {{"model", kLinear}}), 400, "content", "required");
  ExpectError(Post("/tokenize", {{"content", 5}}), 400, "content", "string");
  ExpectError(Post("/tokenize", {{"content", "x"}, {"with_pieces", "yes"}}), 400, "with_pieces",
              "boolean");
  ExpectError(Post("/tokenize", {{"model", "nope"}, {"content", "x"}}), 404, "model", "not found");
  ExpectError(Post("/tokenize", {{"model", kLlama}, {"content", "hello"}}), 400, "content",
              "has no tokenizer.json");
  ExpectError(Post("/detokenize", {{"model", kLinear}}), 400, "tokens", "required");
  ExpectError(Post("/detokenize", {{"tokens", {1, "a"}}}), 400, "tokens[1]", "integer");
  ExpectError(Post("/detokenize", {{"tokens", {1, 256}}}), 400, "tokens[1]",
              "out of range [0, 256)");
  ExpectError(Post("/detokenize", {{"model", kLlama}, {"tokens", {5, 512}}}), 400, "tokens[1]",
              "out of range [0, 512)");
  // The Llama model decodes ids to no text (yet), but they are valid.
  HttpReply r = Post("/detokenize", {{"model", kLlama}, {"tokens", {1, 5, 511}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["content"], "");
}

TEST_F(TokenizerApiTest, ApplyTemplateRendersTheModelsTemplate) {
  const json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "Hi"}}};
  HttpReply r = Post("/apply-template", {{"model", kLinear}, {"messages", messages}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const ChatTemplate t = SmallConfig(AttentionKind::kLinearElu).chat_template;
  const std::string want = server::RenderChat(
      t, {{server::ChatRole::kSystem, "Be brief."}, {server::ChatRole::kUser, "Hi"}});
  EXPECT_EQ(r.body["prompt"], want);
  EXPECT_NE(want.find("Hi"), std::string::npos);
  ExpectError(Post("/apply-template", {{"model", kLinear}}), 400, "messages", "required");
  ExpectError(Post("/apply-template", {{"messages", {{{"role", "robot"}, {"content", "x"}}}}}), 400,
              "messages[0].role", "not supported");
}

TEST_F(TokenizerApiTest, LlamaRefusesTextPromptsNamingTheField) {
  HttpReply r = Post("/v1/completions", {{"model", kLlama}, {"prompt", "hello"}});
  ExpectError(r, 400, "prompt", "send token ids");
  r = Post("/v1/chat/completions",
           {{"model", kLlama}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ExpectError(r, 400, "messages", "model 'tiny-llama' has no chat template");
  r = Post("/v1/completions", {{"model", kLlama}, {"prompt", {1, 5}}, {"stop", "x"}});
  ExpectError(r, 400, "stop", "decodes no text");
  r = Post("/v1/completions", {{"model", kLlama}, {"prompt", {1, 512}}});
  ExpectError(r, 400, "prompt", "prompt_tokens[1] = 512 is out of range [0, 512)");
  r = Post("/v1/completions", {{"model", kLlama}, {"prompt", {1, 2.5}}});
  ExpectError(r, 400, "prompt", "array of token ids");

  StreamResult g = RunGenerate(stub_.get(), GenRequest(kLlama, "hello", 4));
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(g.status.error_message().find("prompt: model 'tiny-llama' has no tokenizer"),
            std::string::npos)
      << g.status.error_message();
  pb::GenerateRequest req = GenRequest(kLlama, "", 4);
  for (int32_t t : {1, 600}) req.add_prompt_tokens(t);
  g = RunGenerate(stub_.get(), req);
  EXPECT_EQ(g.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(g.status.error_message().find("prompt_tokens[1] = 600 is out of range [0, 512)"),
            std::string::npos)
      << g.status.error_message();
}

// The same ids prompt through gRPC and HTTP (plain and nested array) gives the same ids.
TEST_F(TokenizerApiTest, LlamaTokenIdPromptsOnBothApis) {
  const std::vector<int32_t> prompt = {1, 17, 300, 42, 511};
  pb::GenerateRequest req = GenRequest(kLlama, "", 6);
  for (int32_t t : prompt) req.add_prompt_tokens(t);
  req.set_ignore_eos(true);
  StreamResult g = RunGenerate(stub_.get(), req);
  ASSERT_TRUE(g.status.ok()) << g.status.error_message();
  ASSERT_EQ(g.tokens.size(), 6u);
  for (int32_t t : g.tokens) EXPECT_TRUE(t >= 0 && t < 512) << t;
  EXPECT_EQ(g.text, "");
  EXPECT_EQ(g.last.usage().prompt_tokens(), prompt.size());

  for (const json& p : {json(prompt), json::array({prompt})}) {
    HttpReply r = Post("/v1/completions",
                       {{"model", kLlama}, {"prompt", p}, {"max_tokens", 6}, {"ignore_eos", true}});
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["text"], "");
    EXPECT_EQ(r.body["choices"][0]["token_ids"].get<std::vector<int32_t>>(), g.tokens);
    EXPECT_EQ(r.body["usage"]["prompt_tokens"], prompt.size());
  }
  // Streamed: every chunk carries its ids.
  HttpReply r = Post("/v1/completions", {{"model", kLlama},
                                         {"prompt", prompt},
                                         {"max_tokens", 6},
                                         {"ignore_eos", true},
                                         {"stream", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  SseBody sse = ParseSse(r.raw);
  ASSERT_TRUE(sse.well_formed && sse.done) << r.raw;
  std::vector<int32_t> streamed;
  for (const json& ev : sse.events) {
    if (ev["choices"].empty() || !ev["choices"][0].contains("token_ids")) continue;
    for (const json& t : ev["choices"][0]["token_ids"]) streamed.push_back(t.get<int32_t>());
  }
  EXPECT_EQ(streamed, g.tokens);
}

TEST_F(TokenizerApiTest, LogprobsReportTokenIdsAndBytes) {
  // Llama: ids only; the token strings are "token_id:N".
  HttpReply r = Post("/v1/completions", {{"model", kLlama},
                                         {"prompt", {1, 5, 9}},
                                         {"max_tokens", 3},
                                         {"ignore_eos", true},
                                         {"logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& lp = r.body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["token_ids"].size(), 3u);
  EXPECT_EQ(lp["token_ids"], r.body["choices"][0]["token_ids"]);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lp["tokens"][i], absl::StrCat("token_id:", lp["token_ids"][i].get<int>()));
    EXPECT_EQ(lp["token_bytes"][i], json::array());
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
  }
  // Byte-level chat: token_id, and bytes are the token's byte.
  r = Post("/v1/chat/completions", {{"model", kLinear},
                                    {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                    {"max_tokens", 8},
                                    {"logprobs", true},
                                    {"top_logprobs", 3},
                                    {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& content = r.body["choices"][0]["logprobs"]["content"];
  const json& ids = r.body["choices"][0]["token_ids"];
  ASSERT_EQ(content.size(), ids.size());
  ASSERT_GT(content.size(), 0u);
  for (size_t i = 0; i < content.size(); ++i) {
    const int id = content[i]["token_id"].get<int>();
    EXPECT_EQ(id, ids[i].get<int>());
    EXPECT_EQ(content[i]["bytes"], json::array({id}));
    const std::string tok = content[i]["token"];
    if (id < 0x80) {
      EXPECT_EQ(tok, std::string(1, static_cast<char>(id)));
    } else {
      EXPECT_EQ(tok, absl::StrFormat("bytes:\\x%02x", id));
    }
    ASSERT_EQ(content[i]["top_logprobs"].size(), 3u);
    for (const json& alt : content[i]["top_logprobs"]) {
      EXPECT_EQ(alt["bytes"], json::array({alt["token_id"]}));
    }
  }
  // Byte-level completions: text_offset advances by each token's bytes.
  r = Post("/v1/completions",
           {{"model", kLinear}, {"prompt", "abc"}, {"max_tokens", 5}, {"logprobs", 0}});
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& c = r.body["choices"][0]["logprobs"];
  ASSERT_EQ(c["token_ids"].size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(c["text_offset"][i], i);
    EXPECT_EQ(c["token_bytes"][i], json::array({c["token_ids"][i]}));
  }
  EXPECT_FALSE(r.body["choices"][0].contains("token_ids"));  // not asked, model has text
}

// A session's turn that names no model: the session's model encodes the text (here: refuses it).
TEST_F(TokenizerApiTest, SessionTurnTextUsesTheSessionsModel) {
  HttpReply s = Post("/v1/sessions", {{"model", kLlama}});
  ASSERT_EQ(s.status, 200) << s.raw;
  const std::string id = s.body["id"];
  HttpReply r = Post("/v1/completions", {{"session_id", id}, {"prompt", "text"}});
  ExpectError(r, 400, "prompt", "send token ids");
  r = Post("/v1/completions",
           {{"session_id", id}, {"prompt", {1, 2, 3}}, {"max_tokens", 2}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["token_ids"].size(), 2u);
  // A byte-level session continues with text as before.
  HttpReply b = Post("/v1/sessions", {{"model", kLinear}});
  ASSERT_EQ(b.status, 200) << b.raw;
  r = Post("/v1/completions", {{"session_id", b.body["id"]}, {"prompt", "abc"}, {"max_tokens", 2}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 3);
}

}  // namespace
}  // namespace flatstate::testing
