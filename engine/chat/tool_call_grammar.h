// The grammar that forces a chat reply to be a tool call (OpenAI tool_choice "required" or a
// named function; docs/http-api.md), in the form the model's chat template teaches
// (engine/chat/tool_calls.h): one call to one of the `tools` (or to `function` alone), its
// arguments valid for the function's `parameters` JSON Schema (engine/grammar/json_schema.h).
//
// Pure function; thread-safe. Failures are InvalidArgument naming the field: "tool_choice: ..."
// (no tool of that name, a template that teaches no call form), "tools: ..." (a tool without a
// name, parameters outside the supported JSON Schema subset, naming the keyword).
#ifndef FLATSTATE_ENGINE_CHAT_TOOL_CALL_GRAMMAR_H_
#define FLATSTATE_ENGINE_CHAT_TOOL_CALL_GRAMMAR_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/chat/tool_calls.h"
#include "nlohmann/json.hpp"

namespace flatstate {

// GBNF for exactly one call. kHermes: "<tool_call>\n" {"name": ..., "arguments": {...}}
// "\n</tool_call>"; kLlama3Json: {"name": ..., "parameters": {...}}. `function` empty: any tool.
absl::StatusOr<std::string> ToolCallGrammar(const nlohmann::ordered_json& tools,
                                            std::string_view function, ToolCallFormat format);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_CHAT_TOOL_CALL_GRAMMAR_H_
