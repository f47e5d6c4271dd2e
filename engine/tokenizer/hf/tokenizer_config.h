// tokenizer_config.json (and chat_template.jinja) beside a Hugging Face tokenizer.json: the
// special token names, add_bos_token / add_eos_token, and the chat template(s) as data (no
// rendering here).
//
// A plain value; Load reads the files once. Thread-compatible. Load fails with InvalidArgument
// naming the file and the field (bad JSON, a bos_token that is neither a string nor
// {"content": ...}, a chat_template that is neither a string nor a list of {name, template});
// absent files are not an error (an empty config).
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_TOKENIZER_CONFIG_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_TOKENIZER_CONFIG_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace flatstate::hf {

struct TokenizerConfig {
  std::string bos_token;  // "" when none
  std::string eos_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  // The default chat template ("" when none): chat_template.jinja when the folder has one, else
  // tokenizer_config.json's chat_template (a string, or the entry named "default" of a list).
  std::string chat_template;
  // Every named template of a list-valued chat_template, in file order.
  std::vector<std::pair<std::string, std::string>> named_chat_templates;

  // Parses tokenizer_config.json text; `file` names it in errors.
  static absl::StatusOr<TokenizerConfig> Parse(std::string_view json, const std::string& file);
  // Reads `dir`/tokenizer_config.json and `dir`/chat_template.jinja when present.
  static absl::StatusOr<TokenizerConfig> LoadDir(const std::string& dir);
};

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_TOKENIZER_CONFIG_H_
