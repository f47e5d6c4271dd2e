// ChatTemplate: a Jinja2 chat template (the tokenizer_config.json "chat_template" a model ships)
// compiled once and rendered for many conversations, byte-identical to transformers'
// apply_chat_template (jinja2 ImmutableSandboxedEnvironment, trim_blocks + lstrip_blocks,
// loopcontrols, {% generation %}, its tojson override, raise_exception and strftime_now).
//
// A compiled template owns its syntax tree and is immutable: Render is const and thread-safe, so
// one instance may serve all sessions. Parse fails with InvalidArgument
// `chat template "<name>" line N: <why>` on a syntax error or an unknown tag; Render fails the
// same way on a runtime error (raise_exception, an unknown filter or test, calling an undefined
// value, a type error) or when a limit is hit, and never returns partial output. See
// docs/chat-templates.md for the supported syntax.
#ifndef FLATSTATE_ENGINE_TEMPLATE_CHAT_TEMPLATE_H_
#define FLATSTATE_ENGINE_TEMPLATE_CHAT_TEMPLATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/template/ast.h"
#include "engine/template/interpreter.h"
#include "nlohmann/json.hpp"

namespace flatstate::tmpl {

// Jinja2's Environment options, defaulting to what transformers uses.
struct TemplateOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Bounds on one render: output bytes (and any string or list built on the way), steps
// (statements, loop iterations, per-item filter work) and nested macro calls.
using RenderLimits = Limits;

class ChatTemplate {
 public:
  static absl::StatusOr<std::shared_ptr<const ChatTemplate>> Parse(
      std::string name, std::string_view source, const TemplateOptions& options = {});

  // `context` is a JSON object whose members become the template's variables: messages, tools,
  // add_generation_prompt, bos_token, eos_token and any chat_template_kwargs (enable_thinking,
  // ...). ordered_json keeps object keys in request order, as Python dicts do (tojson of tool
  // schemas prints them in that order); a plain nlohmann::json sorts them.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderLimits& limits = {}) const;
  absl::StatusOr<std::string> Render(const nlohmann::json& context,
                                     const RenderLimits& limits = {}) const;

  const std::string& name() const { return name_; }

 private:
  ChatTemplate() = default;
  absl::Status Annotate(const absl::Status& s) const;

  std::string name_;
  Body body_;
};

}  // namespace flatstate::tmpl

#endif  // FLATSTATE_ENGINE_TEMPLATE_CHAT_TEMPLATE_H_
