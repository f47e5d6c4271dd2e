#include "engine/template/chat_template.h"

#include "absl/strings/str_cat.h"
#include "engine/template/lexer.h"
#include "engine/template/parser.h"

namespace flatstate::tmpl {
absl::Status ChatTemplate::Annotate(const absl::Status& s) const {
  return absl::InvalidArgumentError(
      absl::StrCat("chat template \"", name_, "\" ", std::string(s.message())));
}

absl::StatusOr<std::shared_ptr<const ChatTemplate>> ChatTemplate::Parse(
    std::string name, std::string_view source, const TemplateOptions& options) {
  std::shared_ptr<ChatTemplate> t(new ChatTemplate());
  t->name_ = std::move(name);
  LexOptions lex{options.trim_blocks, options.lstrip_blocks, options.keep_trailing_newline};
  auto tokens = Tokenize(source, lex);
  if (!tokens.ok()) return t->Annotate(tokens.status());
  auto body = tmpl::Parse(*std::move(tokens));
  if (!body.ok()) return t->Annotate(body.status());
  t->body_ = *std::move(body);
  return std::shared_ptr<const ChatTemplate>(std::move(t));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context,
                                                 const RenderLimits& limits) const {
  if (!context.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template \"", name_, "\": the context must be a JSON object"));
  }
  std::string out;
  Interpreter in(limits, &out);
  for (const auto& [k, v] : context.items()) in.SetGlobal(k, Value::FromJson(v));
  absl::Status s = in.Render(body_);
  if (!s.ok()) return Annotate(s);
  return out;
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& context,
                                                 const RenderLimits& limits) const {
  return Render(nlohmann::ordered_json::parse(context.dump()), limits);
}

}  // namespace flatstate::tmpl
