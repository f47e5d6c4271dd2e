#include "server/http/openai_request.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/chat/tool_call_grammar.h"
#include "nlohmann/json.hpp"
#include "server/api/validation.h"
#include "server/http/chat_template_input.h"
#include "server/http/json_body.h"

namespace flatstate::server {
namespace {

using json = nlohmann::json;

absl::Status ReadInt(const json& j, const char* key, std::optional<int64_t>* out) {
  const json* v = Field(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number_integer()) return Bad(key, "must be an integer");
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Bad(key, "is too large");
  }
  *out = v->get<int64_t>();
  return absl::OkStatus();
}

absl::Status ReadNumber(const json& j, const char* key, std::optional<double>* out) {
  const json* v = Field(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return Bad(key, "must be a number");
  *out = v->get<double>();
  return absl::OkStatus();
}

// A string, or (allow_list) an array of strings; at most `max` of them.
absl::Status ReadStrings(const json& j, const char* key, size_t max,
                         std::vector<std::string>* out) {
  const json* v = Field(j, key);
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    out->push_back(v->get<std::string>());
    return absl::OkStatus();
  }
  if (!v->is_array()) return Bad(key, "must be a string or an array of strings");
  if (v->size() > max) return Bad(key, absl::StrCat("at most ", max, " entries"));
  for (const json& s : *v) {
    if (!s.is_string()) return Bad(key, "must be a string or an array of strings");
    out->push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

// An array of integers as int32 token ids (range against the vocabulary is checked later).
bool ReadIds(const json& v, std::vector<int32_t>* out) {
  constexpr int64_t kMin = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (const json& t : v) {
    if (!t.is_number_integer()) return false;
    if (t.is_number_unsigned() && t.get<uint64_t>() > static_cast<uint64_t>(kMax)) return false;
    const int64_t id = t.get<int64_t>();
    if (id < kMin || id > kMax) return false;
    out->push_back(static_cast<int32_t>(id));
  }
  return true;
}

// Completions `prompt`: "text", ["text"], [1, 2, 3] or [[1, 2, 3]].
absl::Status ReadPrompt(const json& j, OpenAiRequest* r) {
  const json* v = Field(j, "prompt");
  if (v == nullptr) return absl::OkStatus();
  constexpr char kShapes[] =
      "must be a string, an array of one string, an array of token ids or an array of one "
      "array of token ids";
  if (v->is_string()) {
    r->prompt = v->get<std::string>();
    return absl::OkStatus();
  }
  if (!v->is_array()) return Bad("prompt", kShapes);
  if (v->empty()) {  // [] : no tokens
    r->prompt_is_tokens = true;
    return absl::OkStatus();
  }
  const json& first = (*v)[0];
  if (first.is_string() || first.is_array()) {
    if (v->size() != 1) return Bad("prompt", "only one prompt is supported (n = 1)");
    if (first.is_string()) {
      r->prompt = first.get<std::string>();
      return absl::OkStatus();
    }
    r->prompt_is_tokens = true;
    if (!ReadIds(first, &r->prompt_tokens)) return Bad("prompt", kShapes);
    return absl::OkStatus();
  }
  r->prompt_is_tokens = true;
  if (!ReadIds(*v, &r->prompt_tokens)) return Bad("prompt", kShapes);
  return absl::OkStatus();
}

// Message content: a string or an array of {"type": "text", "text": ...} parts.
absl::StatusOr<std::string> ReadContent(const json& m, const std::string& field) {
  const json* c = Field(m, "content");
  if (c == nullptr) return std::string();
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) return Bad(field, "must be a string or an array of text parts");
  std::string out;
  for (const json& part : *c) {
    const json* type = part.is_object() ? Field(part, "type") : nullptr;
    const json* text = part.is_object() ? Field(part, "text") : nullptr;
    if (type == nullptr || *type != "text" || text == nullptr || !text->is_string()) {
      return Bad(field, "only {\"type\": \"text\", \"text\": string} parts are supported");
    }
    out += text->get<std::string>();
  }
  return out;
}

absl::Status ReadMessages(const json& j, std::vector<ChatMessage>* out,
                          std::string* config_template_error) {
  const json* v = Field(j, "messages");
  if (v == nullptr) return Bad("messages", "is required");
  if (!v->is_array()) return Bad("messages", "must be an array");
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Bad(field, "must be an object");
    const json* role = Field(m, "role");
    if (role == nullptr || !role->is_string()) {
      return Bad(absl::StrCat(field, ".role"), "must be a string");
    }
    ChatMessage msg;
    if (!ParseChatRole(role->get<std::string>(), &msg.role)) {
      if (config_template_error->empty()) {
        *config_template_error = absl::StrCat(
            field, ".role: '", role->get<std::string>(),
            "' is not supported by this model's chat format (system, developer, user, assistant)");
      }
      continue;
    }
    absl::StatusOr<std::string> content = ReadContent(m, absl::StrCat(field, ".content"));
    if (!content.ok()) return content.status();
    msg.content = std::move(*content);
    out->push_back(std::move(msg));
  }
  return absl::OkStatus();
}

absl::Status ReadSampling(const json& j, OpenAiRequest* r) {
  if (absl::Status s = ReadNumber(j, "temperature", &r->temperature); !s.ok()) return s;
  if (absl::Status s = ReadNumber(j, "top_p", &r->top_p); !s.ok()) return s;
  if (absl::Status s = ReadInt(j, "top_k", &r->top_k); !s.ok()) return s;
  std::optional<int64_t> seed;
  if (absl::Status s = ReadInt(j, "seed", &seed); !s.ok()) return s;
  if (seed.has_value()) r->seed = static_cast<uint64_t>(*seed);
  if (r->top_k.has_value() && (*r->top_k < 0 || *r->top_k > std::numeric_limits<int32_t>::max())) {
    return Bad("top_k", "must be >= 0 (0: no top-k cut)");
  }
  return absl::OkStatus();
}

absl::Status ReadLogprobs(const json& j, bool chat, int* out) {
  std::optional<int64_t> k;
  if (chat) {
    bool want = false;
    if (absl::Status s = ReadBool(j, "logprobs", &want); !s.ok()) return s;
    if (absl::Status s = ReadInt(j, "top_logprobs", &k); !s.ok()) return s;
    if (k.has_value() && (*k < 0 || *k > 20)) return Bad("top_logprobs", "must be in [0, 20]");
    if (k.has_value() && !want) return Bad("top_logprobs", "needs logprobs: true");
    if (want) *out = static_cast<int>(k.value_or(0));
    return absl::OkStatus();
  }
  if (absl::Status s = ReadInt(j, "logprobs", &k); !s.ok()) return s;
  if (k.has_value() && (*k < 0 || *k > 20)) return Bad("logprobs", "must be in [0, 20]");
  if (k.has_value()) *out = static_cast<int>(*k);
  return absl::OkStatus();
}

// The request's sampling fields as a transport sends them; nullopt when none is set (the
// session's own sampling, greedy for a throwaway one). Unset fields take OpenAI's defaults.
std::optional<SamplingRequest> ToSamplingRequest(const OpenAiRequest& r) {
  if (!r.temperature && !r.top_p && !r.top_k && !r.seed) return std::nullopt;
  SamplingRequest p;
  p.temperature = static_cast<float>(r.temperature.value_or(1.0));
  p.top_p = static_cast<float>(r.top_p.value_or(1.0));
  p.top_k = static_cast<uint32_t>(r.top_k.value_or(0));
  p.seed = r.seed.value_or(0);
  return p;
}

// The chat fields a Jinja chat template reads, as sent (ordered_json keeps tool schemas' key
// order, as transformers' Python dicts do).
absl::Status ReadChatTemplateFields(absl::string_view body, const json& j, OpenAiRequest* r) {
  const nlohmann::ordered_json o = nlohmann::ordered_json::parse(body, nullptr, false);
  if (o.is_discarded() || !o.is_object()) return Bad("body", "is not a JSON object");
  r->chat_messages = MessagesForTemplate(o.at("messages"));  // ReadMessages checked the array
  if (auto t = o.find("tools"); t != o.end() && !t->is_null()) {
    if (absl::Status s = CheckTools(*t); !s.ok()) return s;
    r->tools = *t;
  }
  if (auto k = o.find("chat_template_kwargs"); k != o.end() && !k->is_null()) {
    if (!k->is_object()) return Bad("chat_template_kwargs", "must be an object");
    r->chat_template_kwargs = *k;
  }
  return ReadBool(j, "add_generation_prompt", &r->add_generation_prompt);
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, bool chat) {
  absl::StatusOr<json> parsed = ParseObject(body);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  OpenAiRequest r;
  r.chat = chat;
  if (absl::Status s = ReadString(j, "model", &r.model); !s.ok()) return s;
  if (absl::Status s = ReadString(j, "session_id", &r.session_id); !s.ok()) return s;
  if (absl::Status s = ReadString(j, "initial_state", &r.initial_state); !s.ok()) return s;
  if (chat) {
    if (absl::Status s = ReadMessages(j, &r.messages, &r.config_template_error); !s.ok()) return s;
    if (absl::Status s = ReadChatTemplateFields(body, j, &r); !s.ok()) return s;
  } else {
    if (absl::Status s = ReadPrompt(j, &r); !s.ok()) return s;
    bool echo = false;
    if (absl::Status s = ReadBool(j, "echo", &echo); !s.ok()) return s;
    if (echo) return Bad("echo", "is not supported");
    if (Field(j, "suffix") != nullptr) return Bad("suffix", "is not supported");
    std::optional<int64_t> best_of;
    if (absl::Status s = ReadInt(j, "best_of", &best_of); !s.ok()) return s;
    if (best_of.value_or(1) != 1) return Bad("best_of", "only 1 is supported");
  }
  std::optional<int64_t> n;
  if (absl::Status s = ReadInt(j, "n", &n); !s.ok()) return s;
  if (n.value_or(1) < 1 || n.value_or(1) > kMaxChoices) {
    return Bad("n", absl::StrCat("must be in [1, ", kMaxChoices, "]"));
  }
  r.n = static_cast<int>(n.value_or(1));
  if (r.n > 1 && !r.session_id.empty()) {
    return Bad("n", "several choices need a stateless request (no session_id); fork the session "
                    "(POST /v1/sessions/{id}/fork) to branch a conversation");
  }
  if (Field(j, "functions") != nullptr) return Bad("functions", "is not supported (use tools)");
  if (!chat && Field(j, "tools") != nullptr) return Bad("tools", "needs /v1/chat/completions");
  if (absl::Status s = ReadBool(j, "stream", &r.stream); !s.ok()) return s;
  if (const json* so = Field(j, "stream_options"); so != nullptr) {
    if (!so->is_object()) return Bad("stream_options", "must be an object");
    if (absl::Status s = ReadBool(*so, "include_usage", &r.include_usage); !s.ok()) {
      return Bad("stream_options", "include_usage must be a boolean");
    }
  }
  if (absl::Status s = ReadInt(j, "max_tokens", &r.max_tokens); !s.ok()) return s;
  std::optional<int64_t> mct;
  if (absl::Status s = ReadInt(j, "max_completion_tokens", &mct); !s.ok()) return s;
  if (mct.has_value()) r.max_tokens = mct;
  if (r.max_tokens.has_value() && *r.max_tokens < 1) {
    return Bad(mct.has_value() ? "max_completion_tokens" : "max_tokens", "must be >= 1");
  }
  if (absl::Status s = ReadSampling(j, &r); !s.ok()) return s;
  if (absl::Status s = ReadStrings(j, "stop", 4, &r.stop); !s.ok()) return s;
  if (absl::Status s = ReadLogprobs(j, chat, &r.logprobs); !s.ok()) return s;
  if (absl::Status s = ReadBool(j, "ignore_eos", &r.ignore_eos); !s.ok()) return s;
  if (const json* ids = Field(j, "stop_token_ids"); ids != nullptr) {
    if (!ids->is_array() || !ReadIds(*ids, &r.stop_token_ids)) {
      return Bad("stop_token_ids", "must be an array of token ids");
    }
  }
  if (absl::Status s = ReadBool(j, "return_token_ids", &r.return_token_ids); !s.ok()) return s;
  if (Field(j, "speculative") != nullptr) {
    bool on = false;
    if (absl::Status s = ReadBool(j, "speculative", &on); !s.ok()) return s;
    r.speculative = on;
  }
  std::optional<int64_t> draft;
  if (absl::Status s = ReadInt(j, "max_draft_tokens", &draft); !s.ok()) return s;
  if (draft.has_value() && (*draft < 1 || *draft > kMaxDraftTokens)) {
    return Bad("max_draft_tokens", absl::StrCat("must be in [1, ", kMaxDraftTokens, "]"));
  }
  r.max_draft_tokens = draft.value_or(0);
  if (absl::Status s = ReadResponseFormat(body, j, &r.structured); !s.ok()) return s;
  if (chat) {  // after response_format, which tool_choice may not be combined with
    if (absl::Status s = ReadToolChoice(j, !r.tools.is_null(), &r.tool_choice_none, &r.structured);
        !s.ok()) {
      return s;
    }
  }
  return r;
}

std::string RenameParamForHttp(absl::string_view param, bool chat) {
  if (param == "max_new_tokens") return "max_tokens";
  if (absl::StartsWith(param, "sampling.")) return std::string(param.substr(9));
  if (absl::StartsWith(param, "stop[")) return "stop";
  if (absl::StartsWith(param, "prompt_tokens")) return "prompt";
  if (chat && param == "prompt") return "messages";
  if (param == "json_schema" || param == "json_object") return "response_format";
  return std::string(param);
}

absl::StatusOr<GenerateJob> ToGenerateJob(const OpenAiRequest& req, const ChatTemplate& tmpl,
                                          const ModelRegistry& models,
                                          const ServerOptions& options) {
  GenerateRequest g;
  g.model = req.model;
  g.session_id = req.session_id;
  if (req.prompt_is_tokens) {
    g.prompt_tokens = req.prompt_tokens;
  } else {
    g.prompt = req.chat ? RenderChat(tmpl, req.messages) : req.prompt;
  }
  const int64_t max_tokens =
      req.max_tokens.value_or(req.chat ? kDefaultChatMaxTokens : kDefaultCompletionMaxTokens);
  g.max_new_tokens =
      static_cast<uint32_t>(std::min<int64_t>(max_tokens, std::numeric_limits<uint32_t>::max()));
  g.sampling = ToSamplingRequest(req);
  g.stop = req.stop;
  g.ignore_eos = req.ignore_eos;
  g.stop_token_ids = req.stop_token_ids;
  g.initial_state = req.initial_state;
  g.grammar = req.structured.grammar;
  g.json_schema = req.structured.json_schema;
  g.json_object = req.structured.json_object;
  g.speculative = req.speculative;
  g.max_draft_tokens = static_cast<uint32_t>(req.max_draft_tokens);
  // A chat prompt already in tokens was rendered by the model's own template: its EOS ends it.
  if (req.chat && !req.prompt_is_tokens)
    g.stop.insert(g.stop.end(), tmpl.stop.begin(), tmpl.stop.end());
  absl::StatusOr<GenerateJob> job = ValidateGenerate(g, models, options);
  if (!job.ok()) return job.status();
  job->logprobs = req.logprobs;
  return job;
}

absl::StatusOr<const ChatPrompt*> ChatPromptFor(const OpenAiRequest& req, const Model& model) {
  if (const ChatPrompt* prompt = model.chat_prompt(); prompt != nullptr) return prompt;
  if (model.config().architecture != "flatstate") {
    return Bad("messages", model.chat_prompt_status().message());
  }
  if (!req.config_template_error.empty()) {
    return absl::InvalidArgumentError(req.config_template_error);
  }
  if (!req.tools.is_null()) {
    return Bad("tools", absl::StrCat("model '", model.name(),
                                     "' has no chat template to describe tools with"));
  }
  return nullptr;
}

Conversation ConversationOf(const OpenAiRequest& req) {
  Conversation c;
  c.messages = req.chat_messages;
  c.tools = req.tools;
  c.kwargs = req.chat_template_kwargs;
  c.add_generation_prompt = req.add_generation_prompt;
  return c;
}

absl::StatusOr<GenerateJob> ToGenerateJobFor(const OpenAiRequest& req, const Model& model,
                                             const ModelRegistry& models,
                                             const ServerOptions& options) {
  if (!req.chat) return ToGenerateJob(req, model.config().chat_template, models, options);
  absl::StatusOr<const ChatPrompt*> prompt = ChatPromptFor(req, model);
  if (!prompt.ok()) return prompt.status();
  if (*prompt == nullptr) return ToGenerateJob(req, model.config().chat_template, models, options);
  absl::StatusOr<std::vector<int32_t>> ids = (*prompt)->Encode(ConversationOf(req));
  if (!ids.ok()) return Bad("messages", ids.status().message());
  OpenAiRequest rendered = req;
  if (req.structured.tool_required) {  // the reply is one call, in the template's form
    absl::StatusOr<std::string> gbnf =
        ToolCallGrammar(req.tools, req.structured.tool_function, (*prompt)->tool_call_format());
    if (!gbnf.ok()) return gbnf.status();
    rendered.structured.grammar = std::move(*gbnf);
  }
  rendered.prompt_tokens = std::move(*ids);
  rendered.prompt_is_tokens = true;
  // The format's own turn end (RWKV's "\n\n"), where it has one besides EOS, and the template's
  // end-of-turn token (like EOS: not with ignore_eos).
  rendered.stop.insert(rendered.stop.end(), (*prompt)->stop().begin(), (*prompt)->stop().end());
  if (!req.ignore_eos) {
    for (int32_t id : (*prompt)->end_of_turn_ids()) {
      if (std::find(rendered.stop_token_ids.begin(), rendered.stop_token_ids.end(), id) ==
          rendered.stop_token_ids.end()) {
        rendered.stop_token_ids.push_back(id);
      }
    }
  }
  return ToGenerateJob(rendered, model.config().chat_template, models, options);
}

absl::StatusOr<std::string> ChatPromptText(const OpenAiRequest& req, const Model& model) {
  absl::StatusOr<const ChatPrompt*> prompt = ChatPromptFor(req, model);
  if (!prompt.ok()) return prompt.status();
  if (*prompt == nullptr) return RenderChat(model.config().chat_template, req.messages);
  absl::StatusOr<std::string> text = (*prompt)->Render(ConversationOf(req));
  if (!text.ok()) return Bad("messages", text.status().message());
  return text;
}

absl::StatusOr<SessionRequest> ParseSessionRequest(absl::string_view body) {
  SessionRequest r;
  if (body.empty()) return r;
  absl::StatusOr<json> parsed = ParseObject(body);
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  if (absl::Status s = ReadString(j, "model", &r.model); !s.ok()) return s;
  if (absl::Status s = ReadString(j, "checkpoint_id", &r.checkpoint_id); !s.ok()) return s;
  std::string b64;
  if (absl::Status s = ReadString(j, "data", &b64); !s.ok()) return s;
  if (!b64.empty() && !absl::Base64Unescape(b64, &r.data)) return Bad("data", "is not base64");
  OpenAiRequest sampling;
  if (absl::Status s = ReadSampling(j, &sampling); !s.ok()) return s;
  if (std::optional<SamplingRequest> p = ToSamplingRequest(sampling); p.has_value()) {
    absl::StatusOr<SamplingParams> sp = ConvertSampling(*p);
    if (!sp.ok()) return sp.status();
    r.sampling = *sp;
  }
  return r;
}

}  // namespace flatstate::server
