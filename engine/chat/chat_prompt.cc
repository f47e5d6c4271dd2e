#include "engine/chat/chat_prompt.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

// A content given as text parts becomes their text; everything else stays as sent.
nlohmann::ordered_json NormaliseMessages(const nlohmann::ordered_json& messages) {
  nlohmann::ordered_json out = messages;
  if (!out.is_array()) return out;
  for (nlohmann::ordered_json& m : out) {
    if (!m.is_object()) continue;
    auto c = m.find("content");
    if (c == m.end() || !c->is_array()) continue;
    std::string text;
    bool all_text = true;
    for (const nlohmann::ordered_json& part : *c) {
      if (!part.is_object()) {
        all_text = false;
        break;
      }
      auto type = part.find("type");
      auto t = part.find("text");
      if (type == part.end() || *type != "text" || t == part.end() || !t->is_string()) {
        all_text = false;
        break;
      }
      text += t->get<std::string>();
    }
    if (all_text) *c = text;
  }
  return out;
}

constexpr std::string_view kProbeReply = "flatstate end-of-turn probe 7f3a";

// The special token the template writes right after an assistant reply, or -1 (see the header).
int32_t ProbeEndOfTurn(const ChatPrompt& prompt, const Tokenizer& tokenizer) {
  for (bool with_system : {false, true}) {  // some templates want a system message first
    Conversation c;
    if (with_system) c.messages.push_back({{"role", "system"}, {"content", "S"}});
    c.messages.push_back({{"role", "user"}, {"content", "Hi"}});
    c.messages.push_back({{"role", "assistant"}, {"content", std::string(kProbeReply)}});
    c.add_generation_prompt = false;
    absl::StatusOr<std::string> text = prompt.Render(c);
    if (!text.ok()) continue;
    const size_t at = text->rfind(kProbeReply);
    if (at == std::string::npos) return -1;
    std::string_view tail = std::string_view(*text).substr(at + kProbeReply.size());
    while (!tail.empty() && (tail[0] == ' ' || tail[0] == '\n' || tail[0] == '\r')) {
      tail.remove_prefix(1);
    }
    if (tail.empty()) return -1;
    absl::StatusOr<std::vector<int32_t>> special =
        tokenizer.EncodeWithOptions(tail, {.add_special = false, .parse_special = true});
    absl::StatusOr<std::vector<int32_t>> plain =
        tokenizer.EncodeWithOptions(tail, {.add_special = false, .parse_special = false});
    // A special token parses to one id that the same text encoded as text does not start with.
    if (!special.ok() || !plain.ok() || special->empty() || plain->empty() ||
        (*special)[0] == (*plain)[0]) {
      return -1;
    }
    return (*special)[0];
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChatPrompt>> ChatPrompt::Create(
    const std::string& model, std::string_view source, std::string bos_token, std::string eos_token,
    const Tokenizer* tokenizer, std::vector<std::string> stop) {
  auto p = std::unique_ptr<ChatPrompt>(new ChatPrompt());
  p->stop_ = std::move(stop);
  ASSIGN_OR_RETURN(p->template_, tmpl::ChatTemplate::Parse(model, source));
  p->bos_token_ = std::move(bos_token);
  p->eos_token_ = std::move(eos_token);
  p->tokenizer_ = tokenizer;
  p->tool_call_format_ = DetectToolCallFormat(source);
  if (tokenizer->has_text()) {
    if (const int32_t eot = ProbeEndOfTurn(*p, *tokenizer); eot >= 0) {
      p->end_of_turn_ids_.push_back(eot);
    }
  }
  return p;
}

absl::StatusOr<std::string> ChatPrompt::Render(const Conversation& c) const {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  // kwargs first, so that the variables below cannot be overridden by them.
  if (c.kwargs.is_object()) {
    for (auto it = c.kwargs.begin(); it != c.kwargs.end(); ++it) ctx[it.key()] = it.value();
  }
  ctx["messages"] = NormaliseMessages(c.messages);
  if (!c.tools.is_null()) ctx["tools"] = c.tools;
  ctx["add_generation_prompt"] = c.add_generation_prompt;
  ctx["bos_token"] = bos_token_;
  ctx["eos_token"] = eos_token_;
  return template_->Render(ctx);
}

absl::StatusOr<std::vector<int32_t>> ChatPrompt::Encode(const Conversation& c) const {
  ASSIGN_OR_RETURN(std::string text, Render(c));
  return tokenizer_->EncodeWithOptions(text, {.add_special = false, .parse_special = true});
}

}  // namespace flatstate
