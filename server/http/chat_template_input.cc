#include "server/http/chat_template_input.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/http/json_body.h"

namespace flatstate::server {

using Json = nlohmann::ordered_json;

absl::Status CheckTools(const Json& tools) {
  if (!tools.is_array()) return Bad("tools", "must be an array");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = absl::StrCat("tools[", i, "]");
    const Json& t = tools[i];
    if (!t.is_object()) return Bad(at, "must be an object");
    if (const Json* type = Field(t, "type"); type != nullptr && *type != "function") {
      return Bad(at + ".type", "must be \"function\" (the only tool type supported)");
    }
    const Json* f = Field(t, "function");
    if (f == nullptr || !f->is_object()) {
      return Bad(at + ".function", "is required: an object with the function's name");
    }
    const Json* name = Field(*f, "name");
    if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) {
      return Bad(at + ".function.name", "is required: a non-empty string");
    }
    if (const Json* d = Field(*f, "description"); d != nullptr && !d->is_string()) {
      return Bad(at + ".function.description", "must be a string");
    }
    if (const Json* p = Field(*f, "parameters"); p != nullptr && !p->is_object()) {
      return Bad(at + ".function.parameters", "must be a JSON Schema object");
    }
  }
  return absl::OkStatus();
}

Json MessagesForTemplate(Json messages) {
  if (!messages.is_array()) return messages;
  for (Json& m : messages) {
    if (m.is_object() && Field(m, "content") == nullptr) m["content"] = "";
  }
  return messages;
}

}  // namespace flatstate::server
