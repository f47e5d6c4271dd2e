#include "engine/tokenizer/hf/tokenizer_config.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "engine/util/read_file.h"
#include "nlohmann/json.hpp"

namespace flatstate::hf {
namespace {

absl::Status TokenName(const nlohmann::json& j, const char* key, const std::string& file,
                       std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  if (it->is_string()) {
    *out = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    *out = (*it)["content"].get<std::string>();
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": ", key, ": expected a string or {\"content\": ...}"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerConfig> TokenizerConfig::Parse(std::string_view json,
                                                       const std::string& file) {
  TokenizerConfig c;
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": not a valid JSON object"));
  }
  absl::Status s = TokenName(j, "bos_token", file, &c.bos_token);
  if (s.ok()) s = TokenName(j, "eos_token", file, &c.eos_token);
  if (!s.ok()) return s;
  for (const char* key : {"add_bos_token", "add_eos_token"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", key, ": not a boolean"));
    }
    (std::string_view(key) == "add_bos_token" ? c.add_bos_token : c.add_eos_token) =
        it->get<bool>();
  }
  if (auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      c.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const nlohmann::json& e = (*it)[i];
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
            !e.contains("template") || !e["template"].is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(
              file, ": chat_template[", i, "]: expected {\"name\": ..., \"template\": ...}"));
        }
        c.named_chat_templates.emplace_back(e["name"].get<std::string>(),
                                            e["template"].get<std::string>());
        if (c.named_chat_templates.back().first == "default") {
          c.chat_template = c.named_chat_templates.back().second;
        }
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": chat_template: expected a string or a list"));
    }
  }
  return c;
}

absl::StatusOr<TokenizerConfig> TokenizerConfig::LoadDir(const std::string& dir) {
  TokenizerConfig c;
  const std::string path = dir + "/tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    auto text = ReadWholeFile(path);
    if (!text.ok()) return text.status();
    auto parsed = Parse(*text, path);
    if (!parsed.ok()) return parsed.status();
    c = std::move(*parsed);
  }
  const std::string jinja = dir + "/chat_template.jinja";
  if (std::filesystem::exists(jinja, ec)) {
    auto text = ReadWholeFile(jinja);
    if (!text.ok()) return text.status();
    c.chat_template = std::move(*text);
  }
  return c;
}

}  // namespace flatstate::hf
