// The JSON request-body helpers the HTTP API's parsers share (openai_request.cc,
// tokenize_api.cc): an error naming the field, the body as an object, a member that is present
// and not null, an optional string or boolean member. Header-only, stateless, thread-safe.
#ifndef FLATSTATE_SERVER_HTTP_JSON_BODY_H_
#define FLATSTATE_SERVER_HTTP_JSON_BODY_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace flatstate::server {

// InvalidArgument "<field>: <why>".
inline absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

// The body parsed as a JSON object; InvalidArgument naming "body" otherwise.
inline absl::StatusOr<nlohmann::json> ParseObject(absl::string_view body) {
  nlohmann::json j =
      nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("body: not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  return j;
}

// The member `key` when present and not null (of a nlohmann::json or ordered_json object).
template <typename Json>
const Json* Field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// Optional members: absent or null leaves *out; another type is Bad naming the key.
inline absl::Status ReadString(const nlohmann::json& j, const char* key, std::string* out) {
  const nlohmann::json* v = Field(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return Bad(key, "must be a string");
  *out = v->get<std::string>();
  return absl::OkStatus();
}
inline absl::Status ReadBool(const nlohmann::json& j, const char* key, bool* out) {
  const nlohmann::json* v = Field(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return Bad(key, "must be a boolean");
  *out = v->get<bool>();
  return absl::OkStatus();
}

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_JSON_BODY_H_
