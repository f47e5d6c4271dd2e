#include "engine/tokenizer/hf/post_processor.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace flatstate::hf {
namespace {

absl::Status Apply(const nlohmann::json& j, const std::string& where, PostProcessor* p) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".type: missing or not a string"));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".processors: missing or not a list"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      absl::Status s = Apply((*it)[i], absl::StrCat(where, ".processors[", i, "]"), p);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  std::vector<int32_t> pre, post;
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    const auto id_of = [&](const char* key, int32_t* id) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".", key, ": expected [token, id]"));
      }
      *id = (*it)[1].get<int32_t>();
      return absl::OkStatus();
    };
    int32_t cls, sep;
    absl::Status s = id_of("cls", &cls);
    if (s.ok()) s = id_of("sep", &sep);
    if (!s.ok()) return s;
    pre = {cls};
    post = {sep};
  } else if (type == "TemplateProcessing") {
    auto single = j.find("single");
    if (single == j.end() || !single->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".single: missing or not a list"));
    }
    const nlohmann::json specials = j.value("special_tokens", nlohmann::json::object());
    bool seen_seq = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const nlohmann::json& piece = (*single)[i];
      const std::string at = absl::StrCat(where, ".single[", i, "]");
      if (piece.is_object() && piece.contains("Sequence")) {
        seen_seq = true;
        continue;
      }
      if (!piece.is_object() || !piece.contains("SpecialToken") ||
          !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ": expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}"));
      }
      const std::string name = piece["SpecialToken"]["id"].get<std::string>();
      auto sp = specials.is_object() ? specials.find(name) : specials.end();
      if (sp == specials.end() || !sp->is_object() || !sp->contains("ids") ||
          !(*sp)["ids"].is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".special_tokens: no entry with ids for \"", name, "\" (used by ", at, ")"));
      }
      for (const auto& id : (*sp)["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
            id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ".special_tokens[\"", name, "\"].ids: not a token id"));
        }
        (seen_seq ? post : pre).push_back(id.get<int32_t>());
      }
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".type: unsupported post-processor \"", type, "\""));
  }
  p->prefix.insert(p->prefix.begin(), pre.begin(), pre.end());
  p->suffix.insert(p->suffix.end(), post.begin(), post.end());
  p->adds_tokens = true;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PostProcessor> PostProcessor::FromJson(const nlohmann::json& j,
                                                      const std::string& where) {
  PostProcessor p;
  absl::Status s = Apply(j, where, &p);
  if (!s.ok()) return s;
  return p;
}

}  // namespace flatstate::hf
