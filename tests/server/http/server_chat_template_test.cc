// /v1/chat/completions and /apply-template with a model that ships a Jinja chat template
// (engine/chat/chat_prompt.h): a copy of tests/data/hf_qwen35_tiny given a byte-level BPE
// tokenizer.json with ChatML's two special tokens and a ChatML chat_template in
// tokenizer_config.json. The rendered prompt, its token count in `usage`, tool messages and
// kwargs reaching the template, a reply ending at the template's end-of-turn token and at
// stop_token_ids, a forced tool call (tool_choice), and a template's own error as a 400 naming
// the line.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf/text_util.h"
#include "tests/server/http/http_test_util.h"

namespace flatstate::testing {
namespace {

constexpr char kChat[] = "tiny-chat";

// GPT-2's bytes_to_unicode (hf::ByteToChar): one vocabulary entry per byte, id = the byte.
std::string ByteLevelVocabJson() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[hf::ByteToChar(static_cast<uint8_t>(b))] = b;
  return vocab.dump();
}

const std::string& ChatModelsDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(TempDir() + "/chat_models");
    const std::string m = *d + "/" + kChat;
    std::error_code ec;
    std::filesystem::create_directories(*d, ec);
    std::filesystem::copy(std::string(FLATSTATE_SOURCE_DIR) + "/tests/data/hf_qwen35_tiny", m,
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::overwrite_existing,
                          ec);
    EXPECT_FALSE(ec) << ec.message();
    std::ofstream(m + "/tokenizer.json")
        << absl::StrCat(R"({
      "version": "1.0",
      "added_tokens": [
        {"id": 256, "content": "<|im_start|>", "special": true, "single_word": false,
         "lstrip": false, "rstrip": false, "normalized": false},
        {"id": 257, "content": "<|im_end|>", "special": true, "single_word": false,
         "lstrip": false, "rstrip": false, "normalized": false}],
      "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true,
                        "use_regex": true},
      "post_processor": null,
      "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true,
                  "use_regex": true},
      "model": {"type": "BPE", "dropout": null, "unk_token": null,
                "continuing_subword_prefix": null, "end_of_word_suffix": null,
                "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": )",
                        ByteLevelVocabJson(), R"(, "merges": []}})");
    const nlohmann::json config{
        {"eos_token", "<|im_end|>"},
        {"chat_template",
         "{#- calls are written <tool_call>...</tool_call> (Hermes) #}"
         "{%- if messages[0].role == 'robot' %}{{ raise_exception('no robots') }}{% endif %}"
         "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content }}"
         "{% if tools and loop.first %} [{{ tools | length }} tools]{% endif %}"
         "{{ '<|im_end|>\\n' }}{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
         "{% if enable_thinking is false %}<think></think>{% endif %}{% endif %}"}};
    std::ofstream(m + "/tokenizer_config.json") << config.dump();
    std::filesystem::remove(m + "/tokenizer.model", ec);
    return d;
  }();
  return *dir;
}

class ChatTemplateApiTest : public HttpTest {
 protected:
  static void SetUpTestSuite() {
    server::ServerOptions o = HttpTestOptions();
    o.models_dir = ChatModelsDir();
    o.default_model = kChat;
    StartSuiteServer(o);
  }
  // The ids of a reply sampled hot with a fixed seed; `extra` adds request fields.
  std::vector<int32_t> SampledIds(uint64_t seed, int max_tokens, const json& extra) {
    json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                 {"max_tokens", max_tokens},
                 {"temperature", 20.0},
                 {"seed", seed},
                 {"return_token_ids", true}};
    body.update(extra);
    HttpReply r = Post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 200) << r.raw;
    if (r.status != 200) return {};
    return r.body["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  }
};

TEST_F(ChatTemplateApiTest, TheModelsTemplateRendersTheConversation) {
  const json messages = {{{"role", "user"}, {"content", "hi"}}};
  HttpReply r = Post("/apply-template", {{"messages", messages}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  // Tools, a tool message, kwargs and add_generation_prompt all reach the template.
  r = Post("/apply-template", {{"messages",
                                {{{"role", "user"}, {"content", "w?"}},
                                 {{"role", "tool"}, {"tool_call_id", "c"}, {"content", "21"}}}},
                               {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
                               {"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["prompt"],
            "<|im_start|>user\nw? [1 tools]<|im_end|>\n<|im_start|>tool\n21<|im_end|>\n"
            "<|im_start|>assistant\n<think></think>");
  r = Post("/apply-template", {{"messages", messages}, {"add_generation_prompt", false}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["prompt"], "<|im_start|>user\nhi<|im_end|>\n");
}

TEST_F(ChatTemplateApiTest, ChatCompletionRunsTheRenderedIds) {
  HttpReply r = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                              {"max_tokens", 3},
                                              {"temperature", 0},
                                              {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.raw;
  // <|im_start|> u s e r \n h i <|im_end|> \n <|im_start|> a s s i s t a n t \n: 1 + 7 + 1 + 1 +
  // 1 + 10 = 21 ids (special tokens parsed, every other byte its own token).
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 21) << r.raw;
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 3) << r.raw;
}

TEST_F(ChatTemplateApiTest, RepliesEndAtTheTemplatesEndOfTurnToken) {
  // The template writes <|im_end|> (id 257) after a reply; the model's EOS id is 2
  // (generation_config.json), so only the template tells that 257 ends a turn. A hot sampler
  // (fixed seeds, deterministic) finds a reply that samples 257 before any 2.
  constexpr int32_t kImEnd = 257, kEos = 2;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const std::vector<int32_t> free = SampledIds(seed, 300, {{"ignore_eos", true}});
    auto end = std::find_if(free.begin(), free.end(),
                            [](int32_t id) { return id == kImEnd || id == kEos; });
    if (end == free.end() || *end != kImEnd) continue;
    const size_t at = end - free.begin();
    HttpReply r = Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                                {"max_tokens", 300},
                                                {"temperature", 20.0},
                                                {"seed", seed},
                                                {"return_token_ids", true}});
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop") << r.raw;
    // The end-of-turn id is counted, not sent (as an EOS id).
    EXPECT_EQ(r.body["usage"]["completion_tokens"], at + 1) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["token_ids"].get<std::vector<int32_t>>(),
              std::vector<int32_t>(free.begin(), free.begin() + at));
    return;
  }
  FAIL() << "no seed in 1..40 sampled <|im_end|> before EOS in 300 tokens";
}

TEST_F(ChatTemplateApiTest, StopTokenIdsEndTheReplyAlsoWithIgnoreEos) {
  const std::vector<int32_t> free = SampledIds(7, 24, {{"ignore_eos", true}});
  ASSERT_EQ(free.size(), 24u);
  // The first id that did not occur before it: the reply must end right there.
  size_t at = 1;
  while (at < free.size() && std::find(free.begin(), free.begin() + at, free[at]) !=
                                 free.begin() + at) {
    ++at;
  }
  ASSERT_LT(at, free.size());
  const std::vector<int32_t> cut =
      SampledIds(7, 24, {{"ignore_eos", true}, {"stop_token_ids", {free[at]}}});
  EXPECT_EQ(cut, std::vector<int32_t>(free.begin(), free.begin() + at));
  // An id outside the vocabulary, or a malformed list: a 400 naming the field.
  for (const json& bad : {json{{"stop_token_ids", {5, 100000}}}, json{{"stop_token_ids", "x"}},
                          json{{"stop_token_ids", std::vector<int>(17, 3)}}}) {
    json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
    body.update(bad);
    HttpReply r = Post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.raw;
    EXPECT_NE(r.body["error"]["message"].get<std::string>().find("stop_token_ids"),
              std::string::npos)
        << r.raw;
  }
}

// The template names the Hermes form, so replies to a request with tools are parsed for calls; a
// reply without one (this random model writes none) streams exactly the text it has whole.
TEST_F(ChatTemplateApiTest, RepliesWithToolsStreamTheirTextWhole) {
  json body = {{"messages", {{{"role", "user"}, {"content", "weather?"}}}},
               {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}},
               {"max_tokens", 40},
               {"temperature", 1.5},
               {"seed", 3},
               {"ignore_eos", true}};
  HttpReply whole = Post("/v1/chat/completions", body);
  ASSERT_EQ(whole.status, 200) << whole.raw;
  EXPECT_EQ(whole.body["choices"][0]["finish_reason"], "length") << whole.raw;
  EXPECT_FALSE(whole.body["choices"][0]["message"].contains("tool_calls")) << whole.raw;
  body["stream"] = true;
  HttpReply streamed = Post("/v1/chat/completions", body);
  ASSERT_EQ(streamed.status, 200) << streamed.raw;
  const SseBody sse = ParseSse(streamed.raw);
  ASSERT_TRUE(sse.well_formed && sse.done) << streamed.raw;
  std::string text;
  for (const json& ev : sse.events) text += ev["choices"][0]["delta"].value("content", "");
  EXPECT_EQ(text, whole.body["choices"][0]["message"]["content"]);
}

// tool_choice "required" or a named function: the reply is one call in the template's (Hermes)
// form, to that function, with arguments valid for its parameters (a random model, forced by
// the grammar, engine/chat/tool_call_grammar.h), streamed or not; what cannot be forced is 400.
TEST_F(ChatTemplateApiTest, ToolChoiceForcesOneValidCall) {
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
      "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
      "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}},
      "required": ["a"], "additionalProperties": false}}}])");
  for (const json& choice :
       {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
    for (bool stream : {false, true}) {
      SCOPED_TRACE(choice.dump() + (stream ? " stream" : ""));
      json body = {{"messages", {{{"role", "user"}, {"content", "weather?"}}}},
                   {"tools", tools},
                   {"tool_choice", choice},
                   {"max_tokens", 400},
                   {"temperature", 1.0},
                   {"seed", 4},
                   {"stream", stream}};
      HttpReply r = Post("/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.raw;
      json calls;
      std::string finish;
      if (stream) {
        const SseBody sse = ParseSse(r.raw);
        ASSERT_TRUE(sse.well_formed && sse.done) << r.raw;
        for (const json& ev : sse.events) {
          const json& c = ev["choices"][0];
          if (c["delta"].contains("tool_calls")) calls = c["delta"]["tool_calls"];
          if (c["finish_reason"].is_string()) finish = c["finish_reason"];
        }
      } else {
        calls = r.body["choices"][0]["message"]["tool_calls"];
        finish = r.body["choices"][0]["finish_reason"];
      }
      EXPECT_EQ(finish, "tool_calls") << r.raw;
      ASSERT_TRUE(calls.is_array() && calls.size() == 1) << r.raw;
      const std::string name = calls[0]["function"]["name"];
      if (choice.is_object()) {
        EXPECT_EQ(name, "get_weather");
      }
      const json args = json::parse(calls[0]["function"]["arguments"].get<std::string>());
      if (name == "get_weather") {
        EXPECT_LE(args["city"].get<std::string>().size(), 8u * 4) << args;
        EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << args;
      } else {
        ASSERT_EQ(name, "add");
        EXPECT_TRUE(args["a"].is_number_integer()) << args;
      }
    }
  }
  const std::pair<json, const char*> bad[] = {
      {{{"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}},
       "tool_choice"},
      {{{"tool_choice", "required"}}, "tool_choice"},
      {{{"tools", tools}, {"tool_choice", "sometimes"}}, "tool_choice"},
      {{{"tools", tools},
        {"tool_choice", "required"},
        {"response_format", {{"type", "json_object"}}}},
       "tool_choice"},
  };
  for (const auto& [extra, param] : bad) {
    json body = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 4}};
    body.update(extra);
    HttpReply r = Post("/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << extra.dump() << " -> " << r.raw;
    EXPECT_EQ(r.body["error"]["param"], param) << r.raw;
  }
}

TEST_F(ChatTemplateApiTest, TemplateErrorsAre400sNamingTheLine) {
  HttpReply r = Post("/v1/chat/completions",
                     {{"messages", {{{"role", "robot"}, {"content", "beep"}}}}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["param"], "messages") << r.raw;
  const std::string msg = r.body["error"]["message"];
  EXPECT_NE(msg.find("chat template \"tiny-chat\" line 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no robots"), std::string::npos) << msg;
}

}  // namespace
}  // namespace flatstate::testing
