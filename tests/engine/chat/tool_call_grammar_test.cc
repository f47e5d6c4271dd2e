// ToolCallGrammar (engine/chat/tool_call_grammar.h): the grammar accepts exactly one call in the
// template's form to the chosen tool with valid arguments, and refuses what it cannot force.
#include "engine/chat/tool_call_grammar.h"

#include <string>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_state.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

using Json = nlohmann::ordered_json;

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10},
                   "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "now"}}])");

// Whether the grammar matches `text` whole.
bool Matches(const std::string& gbnf, const std::string& text) {
  auto g = grammar::CompiledGrammar::FromGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << gbnf;
  if (!g.ok()) return false;
  auto s = grammar::GrammarState::Start(*g);
  return s.ok() && s->Advance(text).ok() && s->IsComplete();
}

TEST(ToolCallGrammarTest, HermesAndLlama3Forms) {
  auto any = ToolCallGrammar(kTools, "", ToolCallFormat::kHermes);
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_TRUE(Matches(*any,
                      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                      "{\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>"));
  EXPECT_TRUE(Matches(*any, "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>"));
  EXPECT_FALSE(Matches(*any,
                       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                       "{\"city\": \"Oslo\", \"unit\": \"k\"}}\n</tool_call>"));
  EXPECT_FALSE(Matches(*any, "{\"name\":\"now\",\"arguments\":{}}"));
  auto named = ToolCallGrammar(kTools, "now", ToolCallFormat::kLlama3Json);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_TRUE(Matches(*named, "{\"name\": \"now\", \"parameters\": {}}"));
  EXPECT_FALSE(Matches(*named,
                       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"a\", "
                       "\"unit\": \"c\"}}"));
}

TEST(ToolCallGrammarTest, RefusesWhatItCannotForce) {
  auto s = ToolCallGrammar(kTools, "missing", ToolCallFormat::kHermes);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.status().message(), "tool_choice: no tool is named 'missing'");
  s = ToolCallGrammar(kTools, "", ToolCallFormat::kNone);
  EXPECT_EQ(s.status().message().substr(0, 12), "tool_choice:") << s.status();
  s = ToolCallGrammar(Json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "number",
      "multipleOf": 2}}}}}])"),
                      "", ToolCallFormat::kHermes);
  EXPECT_NE(s.status().message().find("tools: unsupported JSON Schema keyword 'multipleOf'"),
            absl::string_view::npos)
      << s.status();
  s = ToolCallGrammar(Json::parse(R"([{"type": "function", "function": {}}])"), "",
                      ToolCallFormat::kHermes);
  EXPECT_EQ(s.status().message(), "tools[0]: a function tool needs function.name");
}

}  // namespace
}  // namespace flatstate
