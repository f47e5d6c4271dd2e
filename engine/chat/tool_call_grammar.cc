#include "engine/chat/tool_call_grammar.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/grammar/json_schema.h"

namespace flatstate {

namespace {

// Whether `text` (GBNF rules) names the rule `name` as a word: not inside a longer rule name (GBNF
// names are letters, digits, '_' and '-') and not right after a quote. A word match, no parse.
bool ReferencesRule(std::string_view text, std::string_view name) {
  auto name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  };
  for (size_t at = text.find(name); at != std::string_view::npos; at = text.find(name, at + 1)) {
    const bool open = at == 0 || (!name_char(text[at - 1]) && text[at - 1] != '"');
    const size_t end = at + name.size();
    const bool close = end == text.size() || !name_char(text[end]);
    if (open && close) return true;
  }
  return false;
}

}  // namespace

using Json = nlohmann::ordered_json;

absl::StatusOr<std::string> ToolCallGrammar(const Json& tools, std::string_view function,
                                            ToolCallFormat format) {
  if (format == ToolCallFormat::kNone) {
    return absl::InvalidArgumentError(
        "tool_choice: the model's chat template teaches no tool-call form flatstate can force "
        "(Hermes <tool_call> or Llama 3 JSON); use \"auto\"");
  }
  const char* args_key = format == ToolCallFormat::kHermes ? "arguments" : "parameters";
  Json calls = Json::array();
  if (!tools.is_array()) return absl::InvalidArgumentError("tools: must be an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const Json* f = t.contains("function") ? &t["function"] : nullptr;
    if (f == nullptr || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tools[", i, "]: a function tool needs function.name"));
    }
    const std::string name = (*f)["name"].get<std::string>();
    if (!function.empty() && name != function) continue;
    Json params = f->contains("parameters") ? (*f)["parameters"] : Json{{"type", "object"}};
    calls.push_back(Json{{"type", "object"},
                         {"properties", {{"name", {{"const", name}}}, {args_key, params}}},
                         {"required", {"name", args_key}}});
  }
  if (calls.empty()) {
    return absl::InvalidArgumentError(
        function.empty()
            ? std::string("tool_choice: \"required\" needs at least one tool")
            : absl::StrCat("tool_choice: no tool is named '", std::string(function), "'"));
  }
  const Json schema = calls.size() == 1 ? calls[0] : Json{{"anyOf", calls}};
  absl::StatusOr<std::string> gbnf = grammar::JsonSchemaToGbnf(schema);
  if (!gbnf.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tools: ", gbnf.status().message()));
  }
  // The converter's root becomes the call's rule; a schema that refers back to its root ("$ref":
  // "#") would now mean the call object, so it is refused.
  constexpr std::string_view kRoot = "root ::= ";
  const size_t first_line_end = std::min(gbnf->find('\n'), gbnf->size());
  if (gbnf->compare(0, kRoot.size(), kRoot) != 0 ||
      ReferencesRule(std::string_view(*gbnf).substr(first_line_end), "root")) {
    return absl::InvalidArgumentError(
        "tools: a parameters schema that refers to its root (\"$ref\": \"#\") cannot be forced");
  }
  std::string out = absl::StrCat("tool-call ::= ", gbnf->substr(kRoot.size()));
  if (format == ToolCallFormat::kHermes) {
    return absl::StrCat("root ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\"\n", out);
  }
  return absl::StrCat("root ::= tool-call\n", out);
}

}  // namespace flatstate
