// ParseOpenAiRequest, ToGenerateJob, RenameParamForHttp and ParseSessionRequest
// (server/http/openai_request.h), without a server: errors name the OpenAI field.
#include "server/http/openai_request.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/api/status_mapping.h"

namespace flatstate::server {
namespace {

// The field an error names, as the HTTP API reports it (ToHttpError's param).
std::string FieldOf(const absl::Status& s) { return ToHttpError(s).param; }

absl::Status ParseError(const std::string& body, bool chat = false) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(body, chat);
  EXPECT_FALSE(r.ok()) << body;
  return r.status();
}

TEST(ParseOpenAiRequestTest, CompletionFieldsAndPromptShapes) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(
      R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
          "top_k": 3, "seed": 11, "stop": ["a", "b"], "logprobs": 2, "stream": true,
          "stream_options": {"include_usage": true}, "ignore_eos": true, "user": "x",
          "unknown": 1})",
      false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->chat);
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->prompt, "hi");
  EXPECT_FALSE(r->prompt_is_tokens);
  EXPECT_EQ(r->max_tokens, 7);
  EXPECT_EQ(r->temperature, 0.5);
  EXPECT_EQ(r->top_p, 0.9);
  EXPECT_EQ(r->top_k, 3);
  EXPECT_EQ(r->seed, 11u);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->logprobs, 2);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->ignore_eos);

  for (const char* body : {R"({"prompt": [1, 2, 3]})", R"({"prompt": [[1, 2, 3]]})"}) {
    absl::StatusOr<OpenAiRequest> t = ParseOpenAiRequest(body, false);
    ASSERT_TRUE(t.ok()) << body << t.status();
    EXPECT_TRUE(t->prompt_is_tokens);
    EXPECT_EQ(t->prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  }
  absl::StatusOr<OpenAiRequest> one = ParseOpenAiRequest(R"({"prompt": ["text"]})", false);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->prompt, "text");
  absl::StatusOr<OpenAiRequest> none = ParseOpenAiRequest(R"({"prompt": []})", false);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->prompt_is_tokens);
  EXPECT_TRUE(none->prompt_tokens.empty());
}

TEST(ParseOpenAiRequestTest, FieldErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": ["a", "b"]})", "prompt"},
      {R"({"prompt": [1, "x"]})", "prompt"},
      {R"({"prompt": [4294967296]})", "prompt"},
      {R"({"model": 3})", "model"},
      {R"({"max_tokens": 0})", "max_tokens"},
      {R"({"max_tokens": 1.5})", "max_tokens"},
      {R"({"max_completion_tokens": 0})", "max_completion_tokens"},
      {R"({"temperature": "hot"})", "temperature"},
      {R"({"top_k": -1})", "top_k"},
      {R"({"seed": "1"})", "seed"},
      {R"({"stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {R"({"stop": [1]})", "stop"},
      {R"({"logprobs": 21})", "logprobs"},
      {R"({"n": 17})", "n"},
      {R"({"n": 0})", "n"},
      {R"({"n": 2, "session_id": "0123456789abcdef0123456789abcdef"})", "n"},
      {R"({"stop_token_ids": [1, "x"]})", "stop_token_ids"},
      {R"({"stop_token_ids": 3})", "stop_token_ids"},
      {R"({"echo": true})", "echo"},
      {R"({"suffix": "x"})", "suffix"},
      {R"({"best_of": 2})", "best_of"},
      {R"({"tools": []})", "tools"},
      {R"({"stream": 1})", "stream"},
      {R"({"stream_options": 1})", "stream_options"},
      {R"({"stream_options": {"include_usage": 1}})", "stream_options"},
      {R"({"ignore_eos": "yes"})", "ignore_eos"},
  };
  for (const auto& [body, field] : cases) {
    const absl::Status s = ParseError(body);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(FieldOf(s), field) << body << " -> " << s;
  }
}

TEST(ParseOpenAiRequestTest, ChatMessagesAndTheirErrors) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(
      R"({"messages": [{"role": "developer", "content": "s"},
                       {"role": "user", "content": [{"type": "text", "text": "a"},
                                                    {"type": "text", "text": "b"}]}],
          "logprobs": true, "top_logprobs": 3})",
      true);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[0].role, ChatRole::kSystem);
  EXPECT_EQ(r->messages[1].content, "ab");
  EXPECT_EQ(r->logprobs, 3);
  EXPECT_TRUE(r->config_template_error.empty());
  EXPECT_EQ(r->chat_messages.size(), 2u);

  // A role a model's Jinja template may know (tool) parses; a ChatTemplate config refuses it
  // later, naming the message (ChatPromptFor).
  absl::StatusOr<OpenAiRequest> tool = ParseOpenAiRequest(
      R"({"messages": [{"role": "user"}, {"role": "tool", "content": "x", "tool_call_id": "c"}],
          "tools": [{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2}}}],
          "chat_template_kwargs": {"enable_thinking": false}, "add_generation_prompt": false})",
      true);
  ASSERT_TRUE(tool.ok()) << tool.status();
  EXPECT_NE(tool->config_template_error.find("messages[1].role: 'tool'"), std::string::npos)
      << tool->config_template_error;
  EXPECT_EQ(tool->chat_messages[1]["tool_call_id"], "c");
  EXPECT_EQ(tool->tools[0]["function"]["parameters"].dump(), R"({"z":1,"a":2})");  // as sent
  EXPECT_EQ(tool->chat_template_kwargs["enable_thinking"], false);
  EXPECT_FALSE(tool->add_generation_prompt);

  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "messages"},
      {R"({"messages": {}})", "messages"},
      {R"({"messages": [1]})", "messages[0]"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content"},
      {R"({"messages": [], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [], "logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {R"({"messages": [], "tools": {}})", "tools"},
      {R"({"messages": [], "tools": [1]})", "tools[0]"},
      {R"({"messages": [], "tool_choice": "required"})", "tool_choice"},
      {R"({"messages": [], "functions": []})", "functions"},
      {R"({"messages": [], "chat_template_kwargs": 1})", "chat_template_kwargs"},
  };
  for (const auto& [body, field] : cases) {
    EXPECT_EQ(FieldOf(ParseError(body, /*chat=*/true)), field) << body;
  }
}

// What the openai clients send back after a tool call: the assistant message with `content:
// null` reaches a Jinja template as "" (vLLM's rendering); `tools` must be function tools, each
// with a name, whatever tool_choice is (server/http/chat_template_input.h).
TEST(ParseOpenAiRequestTest, ToolsAreCheckedAndNullContentReachesTheTemplateEmpty) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(
      R"({"messages": [{"role": "user", "content": "w?"},
                       {"role": "assistant", "content": null, "tool_calls": [{"id": "c",
                        "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                       {"role": "tool", "tool_call_id": "c", "content": "1"},
                       {"role": "assistant", "tool_calls": []}],
          "tools": [{"type": "function", "function": {"name": "f"}},
                    {"function": {"name": "g", "description": "d", "parameters": null}}]})",
      true);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->chat_messages[1]["content"], "");
  EXPECT_EQ(r->chat_messages[1]["tool_calls"][0]["function"]["arguments"], "{}");
  EXPECT_EQ(r->chat_messages[2]["content"], "1");
  EXPECT_EQ(r->chat_messages[3]["content"], "");
  EXPECT_EQ(r->tools.size(), 2u);

  const std::pair<const char*, const char*> cases[] = {
      {R"([{"type": "function", "function": {"parameters": {}}}])", "tools[0].function.name"},
      {R"([{"type": "function", "function": {"name": ""}}])", "tools[0].function.name"},
      {R"([{"type": "function", "function": {"name": 7}}])", "tools[0].function.name"},
      {R"([{"type": "function", "function": {"name": "f"}}, {"type": "function"}])",
       "tools[1].function"},
      {R"([{"type": "function", "function": "f"}])", "tools[0].function"},
      {R"([{"type": "custom", "custom": {"name": "f"}}])", "tools[0].type"},
      {R"([{"type": "function", "function": {"name": "f", "parameters": "x"}}])",
       "tools[0].function.parameters"},
      {R"([{"type": "function", "function": {"name": "f", "description": 1}}])",
       "tools[0].function.description"},
  };
  for (const auto& [tools, field] : cases) {
    for (const char* choice : {"auto", "none", "required"}) {
      const std::string body = absl::StrCat(R"({"messages": [], "tool_choice": ")", choice,
                                            R"(", "tools": )", tools, "}");
      EXPECT_EQ(FieldOf(ParseError(body, /*chat=*/true)), field) << body;
    }
  }
}

TEST(ParseOpenAiRequestTest, BodyThatIsNotAJsonObjectIsRefused) {
  for (const char* body : {"", "[]", "{", "\"x\""}) {
    EXPECT_EQ(ParseError(body).code(), absl::StatusCode::kInvalidArgument) << body;
  }
}

// No models: validation-only (prompt text is bytes, token ids are checked against 256).
class ToGenerateJobTest : public ::testing::Test {
 protected:
  ModelRegistry models_{{}, ""};
  ServerOptions options_;
};

TEST_F(ToGenerateJobTest, CompletionDefaultsAndSampling) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(R"({"prompt": "ab", "seed": 3})", false);
  ASSERT_TRUE(r.ok());
  absl::StatusOr<GenerateJob> job = ToGenerateJob(*r, ChatTemplate{}, models_, options_);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->prompt, (std::vector<int32_t>{'a', 'b'}));
  EXPECT_EQ(job->max_new_tokens, kDefaultCompletionMaxTokens);
  ASSERT_TRUE(job->sampling.has_value());  // any sampling field: OpenAI's defaults for the rest
  EXPECT_EQ(job->sampling->temperature, 1.f);
  EXPECT_EQ(job->sampling->top_p, 1.f);
  EXPECT_EQ(job->sampling->seed, 3u);
  EXPECT_EQ(job->logprobs, -1);
  EXPECT_TRUE(job->stop.empty());

  absl::StatusOr<OpenAiRequest> plain = ParseOpenAiRequest(R"({"prompt": "ab"})", false);
  ASSERT_TRUE(plain.ok());
  absl::StatusOr<GenerateJob> greedy = ToGenerateJob(*plain, ChatTemplate{}, models_, options_);
  ASSERT_TRUE(greedy.ok());
  EXPECT_FALSE(greedy->sampling.has_value());  // none set: the session's own (greedy)
}

TEST_F(ToGenerateJobTest, ChatRendersTheTemplateAndStopsAtItsStopStrings) {
  absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(
      R"({"messages": [{"role": "user", "content": "hi"}], "stop": "X", "logprobs": true})", true);
  ASSERT_TRUE(r.ok());
  const ChatTemplate t{"", "U:", "A:", ";", {";", "U:"}};
  absl::StatusOr<GenerateJob> job = ToGenerateJob(*r, t, models_, options_);
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string rendered = "U:hi;A:";
  EXPECT_EQ(job->prompt, std::vector<int32_t>(rendered.begin(), rendered.end()));
  EXPECT_EQ(job->stop, (std::vector<std::string>{"X", ";", "U:"}));
  EXPECT_EQ(job->max_new_tokens, kDefaultChatMaxTokens);
  EXPECT_EQ(job->logprobs, 0);
}

TEST_F(ToGenerateJobTest, ValidationErrorsUseTheSharedFieldNamesThatRenameForHttp) {
  options_.max_new_tokens_limit = 10;
  absl::StatusOr<OpenAiRequest> r =
      ParseOpenAiRequest(R"({"prompt": "a", "max_tokens": 11})", false);
  ASSERT_TRUE(r.ok());
  absl::StatusOr<GenerateJob> job = ToGenerateJob(*r, ChatTemplate{}, models_, options_);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(FieldOf(job.status()), "max_new_tokens");
  EXPECT_EQ(RenameParamForHttp(FieldOf(job.status()), false), "max_tokens");

  absl::StatusOr<OpenAiRequest> ids = ParseOpenAiRequest(R"({"prompt": [1, 256]})", false);
  ASSERT_TRUE(ids.ok());
  job = ToGenerateJob(*ids, ChatTemplate{}, models_, options_);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(RenameParamForHttp("sampling.temperature", false), "temperature");
  EXPECT_EQ(RenameParamForHttp("stop[2]", false), "stop");
  EXPECT_EQ(RenameParamForHttp("prompt_tokens[1]", false), "prompt");
  EXPECT_EQ(RenameParamForHttp("prompt", true), "messages");
  EXPECT_EQ(RenameParamForHttp("prompt", false), "prompt");
  EXPECT_EQ(RenameParamForHttp("session_id", true), "session_id");
}

TEST(ParseSessionRequestTest, FieldsAndErrors) {
  absl::StatusOr<SessionRequest> empty = ParseSessionRequest("");
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->sampling.has_value());

  absl::StatusOr<SessionRequest> r =
      ParseSessionRequest(R"({"model": "m", "data": "aGk=", "temperature": 0.25, "top_k": 2})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->data, "hi");
  ASSERT_TRUE(r->sampling.has_value());
  EXPECT_EQ(r->sampling->temperature, 0.25f);
  EXPECT_EQ(r->sampling->top_k, 2);

  EXPECT_EQ(FieldOf(ParseSessionRequest(R"({"data": "%%%"})").status()), "data");
  EXPECT_EQ(FieldOf(ParseSessionRequest(R"({"temperature": -1})").status()),
            "sampling.temperature");
  EXPECT_FALSE(ParseSessionRequest("[]").ok());
}

}  // namespace
}  // namespace flatstate::server
