#include "server/tokenize_api.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_tokenizer.h"

namespace flatstate::server {
namespace {

using json = nlohmann::json;

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::StatusOr<json> ParseObject(absl::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("body: not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("body: must be a JSON object");
  return j;
}

const json* Field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

absl::Status ReadModel(const json& j, std::string* model) {
  const json* v = Field(j, "model");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_string()) return Bad("model", "must be a string");
  *model = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadBool(const json& j, const char* key, bool* out) {
  const json* v = Field(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return Bad(key, "must be a boolean");
  *out = v->get<bool>();
  return absl::OkStatus();
}

json Piece(const std::string& bytes) {
  if (IsValidUtf8(bytes)) return bytes;
  json out = json::array();
  for (char c : bytes) out.push_back(static_cast<uint8_t>(c));
  return out;
}

}  // namespace

absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(absl::string_view body) {
  absl::StatusOr<json> j = ParseObject(body);
  if (!j.ok()) return j.status();
  TokenizeRequest r;
  if (absl::Status s = ReadModel(*j, &r.model); !s.ok()) return s;
  const json* content = Field(*j, "content");
  if (content == nullptr) return Bad("content", "is required");
  if (!content->is_string()) return Bad("content", "must be a string");
  r.content = content->get<std::string>();
  if (absl::Status s = ReadBool(*j, "add_special", &r.add_special); !s.ok()) return s;
  if (absl::Status s = ReadBool(*j, "with_pieces", &r.with_pieces); !s.ok()) return s;
  return r;
}

absl::StatusOr<json> TokenizeJson(const Tokenizer& tokenizer, const TokenizeRequest& r) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(r.content, r.add_special);
  if (!ids.ok()) {
    return absl::Status(ids.status().code(), absl::StrCat("content: ", ids.status().message()));
  }
  json tokens = json::array();
  for (int32_t id : *ids) {
    if (r.with_pieces) {
      tokens.push_back({{"id", id}, {"piece", Piece(tokenizer.TokenBytes(id))}});
    } else {
      tokens.push_back(id);
    }
  }
  return json{{"tokens", std::move(tokens)}};
}

absl::StatusOr<DetokenizeRequest> ParseDetokenizeRequest(absl::string_view body) {
  absl::StatusOr<json> j = ParseObject(body);
  if (!j.ok()) return j.status();
  DetokenizeRequest r;
  if (absl::Status s = ReadModel(*j, &r.model); !s.ok()) return s;
  const json* tokens = Field(*j, "tokens");
  if (tokens == nullptr) return Bad("tokens", "is required");
  if (!tokens->is_array()) return Bad("tokens", "must be an array of token ids");
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    const bool fits = t.is_number_integer() &&
                      (t.is_number_unsigned()
                           ? t.get<uint64_t>() <= std::numeric_limits<int32_t>::max()
                           : t.get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
                                 t.get<int64_t>() <= std::numeric_limits<int32_t>::max());
    if (!fits) return Bad(absl::StrCat("tokens[", i, "]"), "must be a 32-bit integer token id");
    r.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return r;
}

absl::StatusOr<json> DetokenizeJson(const Tokenizer& tokenizer, const DetokenizeRequest& r) {
  if (absl::Status s = tokenizer.ValidateIds(r.tokens, "tokens"); !s.ok()) return s;
  return json{{"content", tokenizer.Decode(r.tokens)}};
}

}  // namespace flatstate::server
