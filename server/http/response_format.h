// The structured-output fields of POST /v1/completions and /v1/chat/completions
// (docs/http-api.md, "Structured output"): OpenAI's `response_format` and llama.cpp's `grammar`.
//
// Stateless; thread-safe. Failures are InvalidArgument whose message starts with the field name
// ("response_format: ...", "grammar: ..."), so ToHttpError names it. The schema and grammar are
// only read here; ValidateGenerate (server/api/validation.h) converts and compiles them.
#ifndef FLATSTATE_SERVER_HTTP_RESPONSE_FORMAT_H_
#define FLATSTATE_SERVER_HTTP_RESPONSE_FORMAT_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace flatstate::server {

// At most one is set.
struct StructuredOutput {
  std::string grammar;      // GBNF text
  std::string json_schema;  // response_format json_schema's `schema`, as JSON text (key order kept)
  bool json_object = false;
  // tool_choice "required" or {"type": "function", "function": {"name": ...}}: the reply is one
  // tool call (engine/chat/tool_call_grammar.h), to `tool_function` when it is set.
  bool tool_required = false;
  std::string tool_function;
};

// Reads `grammar` and `response_format` of the parsed body `j` (`body`: its text, re-read with
// the key order kept when a schema is sent). response_format is {"type": "text"} (nothing),
// {"type": "json_object"} or {"type": "json_schema", "json_schema": {"name", "schema", "strict",
// "description"}}; another type, a missing or non-object schema, or `grammar` beside a JSON
// format is refused naming response_format.
absl::Status ReadResponseFormat(absl::string_view body, const nlohmann::json& j,
                                StructuredOutput* out);

// Reads `tool_choice`: "auto" (or absent), "none" (*none), "required" or a named function (both
// need `has_tools`, and neither goes with a JSON response_format or a grammar). Errors name
// tool_choice.
absl::Status ReadToolChoice(const nlohmann::json& j, bool has_tools, bool* none,
                            StructuredOutput* out);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_RESPONSE_FORMAT_H_
