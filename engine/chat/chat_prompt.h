// ChatPrompt: a Hugging Face model's chat template (tokenizer_config.json's chat_template or
// chat_template.jinja), compiled once at load, turning an OpenAI-style conversation into prompt
// token ids the way transformers' apply_chat_template(tokenize=True) does: render the template
// (engine/template/chat_template.h) with `messages`, `tools` (when given), `add_generation_prompt`,
// `bos_token`, `eos_token` and the request's chat_template_kwargs (enable_thinking, ...), then
// encode the text with the special tokens it contains parsed and no BOS / EOS added (the
// template writes them).
//
// Messages are passed to the template as sent, except that a content given as an array of text
// parts becomes their concatenated text (a text-only model's templates read a string).
//
// The template's end-of-turn token: Create renders a probe conversation (a user message, then an
// assistant reply holding a marker) without a generation prompt and takes the special token the
// template writes right after the reply (after any spaces / newlines), e.g. Qwen's <|im_end|>,
// Llama 3's <|eot_id|>, Gemma's <end_of_turn>. A reply then ends at that token as at EOS, also
// when generation_config.json does not list it. A template that fails on the probe, or writes
// plain text after the reply, has none (end_of_turn_ids() empty).
//
// Immutable after Create; every method is thread-safe. Create fails with the template's parse
// error (InvalidArgument `chat template "<model>" line N: ...`); Render / Encode fail with its
// runtime error (raise_exception, a limit) or the tokenizer's, never with partial output.
#ifndef FLATSTATE_ENGINE_CHAT_CHAT_PROMPT_H_
#define FLATSTATE_ENGINE_CHAT_CHAT_PROMPT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/tool_calls.h"
#include "engine/template/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace flatstate {

struct Conversation {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;                                      // null: none given
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
};

class ChatPrompt {
 public:
  // `tokenizer` must outlive the result; `model` names the template in errors.
  // `stop`: strings that end a reply in this format besides the EOS ids (RWKV's "\n\n"; none
  // for a Hugging Face template, whose replies end at EOS).
  static absl::StatusOr<std::unique_ptr<ChatPrompt>> Create(
      const std::string& model, std::string_view source, std::string bos_token,
      std::string eos_token, const Tokenizer* tokenizer, std::vector<std::string> stop = {});
  const std::vector<std::string>& stop() const { return stop_; }
  // The special token(s) that end an assistant turn in this template (see above); may be empty.
  const std::vector<int32_t>& end_of_turn_ids() const { return end_of_turn_ids_; }
  // How this template's model writes tool calls (engine/chat/tool_calls.h).
  ToolCallFormat tool_call_format() const { return tool_call_format_; }

  absl::StatusOr<std::string> Render(const Conversation& c) const;
  absl::StatusOr<std::vector<int32_t>> Encode(const Conversation& c) const;

 private:
  ChatPrompt() = default;

  std::shared_ptr<const tmpl::ChatTemplate> template_;
  std::string bos_token_, eos_token_;
  const Tokenizer* tokenizer_ = nullptr;
  std::vector<std::string> stop_;
  std::vector<int32_t> end_of_turn_ids_;
  ToolCallFormat tool_call_format_ = ToolCallFormat::kNone;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_CHAT_CHAT_PROMPT_H_
