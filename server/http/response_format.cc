// response_format and grammar of the OpenAI request bodies (docs/http-api.md, "Structured
// output").
#include "server/http/response_format.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/http/json_body.h"

namespace flatstate::server {

using json = nlohmann::json;

absl::Status ReadResponseFormat(absl::string_view body, const json& j, StructuredOutput* r) {
  if (absl::Status s = ReadString(j, "grammar", &r->grammar); !s.ok()) return s;
  const json* rf = Field(j, "response_format");
  if (rf == nullptr) return absl::OkStatus();
  if (!rf->is_object()) return Bad("response_format", "must be an object");
  const json* type = Field(*rf, "type");
  if (type == nullptr || !type->is_string()) {
    return Bad("response_format", "type must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return absl::OkStatus();
  if (t != "json_object" && t != "json_schema") {
    return Bad("response_format", absl::StrCat("type '", t,
                                               "' is not supported (\"text\", "
                                               "\"json_object\" or \"json_schema\")"));
  }
  if (!r->grammar.empty()) {
    return Bad("response_format", "cannot be combined with grammar; send one of them");
  }
  if (t == "json_object") {
    r->json_object = true;
    return absl::OkStatus();
  }
  const json* js = Field(*rf, "json_schema");
  if (js == nullptr || !js->is_object()) {
    return Bad("response_format", "type \"json_schema\" needs a json_schema object");
  }
  if (const json* name = Field(*js, "name"); name != nullptr && !name->is_string()) {
    return Bad("response_format", "json_schema.name must be a string");
  }
  if (const json* strict = Field(*js, "strict"); strict != nullptr && !strict->is_boolean()) {
    return Bad("response_format", "json_schema.strict must be a boolean");
  }
  const json* schema = Field(*js, "schema");
  if (schema == nullptr || !schema->is_object()) {
    return Bad("response_format", "json_schema.schema must be a JSON Schema object");
  }
  // Again with the keys in the order sent: properties are generated in the schema's order.
  const nlohmann::ordered_json o = nlohmann::ordered_json::parse(body, nullptr, false);
  r->json_schema = o.at("response_format").at("json_schema").at("schema").dump();
  return absl::OkStatus();
}

absl::Status ReadToolChoice(const json& j, bool has_tools, bool* none, StructuredOutput* out) {
  const json* tc = Field(j, "tool_choice");
  if (tc == nullptr) return absl::OkStatus();
  if (tc->is_string() && (*tc == "auto" || *tc == "none")) {
    *none = *tc == "none";
    return absl::OkStatus();
  }
  if (tc->is_string() && *tc == "required") {
    out->tool_required = true;
  } else if (tc->is_object() && tc->value("type", "") == "function" && tc->contains("function") &&
             (*tc)["function"].is_object() && (*tc)["function"].contains("name") &&
             (*tc)["function"]["name"].is_string() &&
             !(*tc)["function"]["name"].get<std::string>().empty()) {
    out->tool_required = true;
    out->tool_function = (*tc)["function"]["name"].get<std::string>();
  } else {
    return Bad("tool_choice",
               "must be \"auto\", \"none\", \"required\" or "
               "{\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (!has_tools) return Bad("tool_choice", "forcing a tool call needs `tools`");
  if (out->json_object || !out->json_schema.empty() || !out->grammar.empty()) {
    return Bad("tool_choice",
               "forcing a tool call cannot be combined with a JSON "
               "response_format or a grammar");
  }
  return absl::OkStatus();
}

}  // namespace flatstate::server
