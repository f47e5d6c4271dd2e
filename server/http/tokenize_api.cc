#include "server/http/tokenize_api.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "server/http/json_body.h"

namespace flatstate::server {
namespace {

using json = nlohmann::json;

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
  if (absl::Status s = ReadString(*j, "model", &r.model); !s.ok()) return s;
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
  if (absl::Status s = ReadString(*j, "model", &r.model); !s.ok()) return s;
  const json* tokens = Field(*j, "tokens");
  if (tokens == nullptr) return Bad("tokens", "is required");
  if (!tokens->is_array()) return Bad("tokens", "must be an array of token ids");
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& t = (*tokens)[i];
    const bool fits =
        t.is_number_integer() &&
        (t.is_number_unsigned() ? t.get<uint64_t>() <= std::numeric_limits<int32_t>::max()
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
