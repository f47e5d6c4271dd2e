#include "server/http/openai_response.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "server/store/ids.h"

namespace flatstate::server {
namespace {

using json = nlohmann::json;

json BytesJson(const std::string& bytes) {
  json out = json::array();
  for (char c : bytes) out.push_back(static_cast<uint8_t>(c));
  return out;
}

}  // namespace

std::string TokenString(const Tokenizer& tokenizer, int32_t token) {
  const std::string bytes = tokenizer.TokenBytes(token);
  if (bytes.empty()) return absl::StrCat("token_id:", token);
  if (IsValidUtf8(bytes)) return bytes;
  std::string out = "bytes:";
  for (char c : bytes) absl::StrAppendFormat(&out, "\\x%02x", static_cast<uint8_t>(c));
  return out;
}

CompletionMeta NewCompletionMeta(bool chat) {
  CompletionMeta m;
  m.chat = chat;
  m.id = (chat ? "chatcmpl-" : "cmpl-") + NewId();
  m.created = absl::ToUnixSeconds(absl::Now());
  return m;
}

const char* OpenAiFinishReason(FinishReason r) {
  return r == FinishReason::kStop || r == FinishReason::kEos ? "stop" : "length";
}

json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index) {
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json c{{"id", "call_" + NewId().substr(0, 24)},
           {"type", "function"},
           {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (with_index) c["index"] = k;
    out.push_back(std::move(c));
  }
  return out;
}

json UsageJson(const GenerateSummary& s) {
  return json{{"prompt_tokens", s.prompt_tokens},
              {"prompt_tokens_details", {{"cached_tokens", s.cached_prompt_tokens}}},
              {"completion_tokens", s.generated_tokens},
              {"total_tokens", s.prompt_tokens + s.generated_tokens},
              {"context_tokens", s.context_tokens},
              {"state_bytes", s.state_bytes}};
}

json LogprobsJson(bool chat, const Tokenizer& tokenizer, const std::vector<TokenLogprobs>& lps,
                  size_t* text_offset) {
  auto entry = [&](int32_t t, float l) {
    return json{{"token", TokenString(tokenizer, t)},
                {"logprob", l},
                {"bytes", BytesJson(tokenizer.TokenBytes(t))},
                {"token_id", t}};
  };
  if (chat) {
    json content = json::array();
    for (const TokenLogprobs& lp : lps) {
      json top = json::array();
      for (const auto& [t, l] : lp.top) top.push_back(entry(t, l));
      json e = entry(lp.token, lp.logprob);
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
    }
    return json{{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array(), ids = json::array(), bytes = json::array();
  for (const TokenLogprobs& lp : lps) {
    const std::string b = tokenizer.TokenBytes(lp.token);
    tokens.push_back(TokenString(tokenizer, lp.token));
    token_logprobs.push_back(lp.logprob);
    json alt = json::object();
    for (const auto& [t, l] : lp.top) alt[TokenString(tokenizer, t)] = l;
    top.push_back(std::move(alt));
    offsets.push_back(*text_offset);
    *text_offset += b.size();
    ids.push_back(lp.token);
    bytes.push_back(BytesJson(b));
  }
  return json{{"tokens", std::move(tokens)},    {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)}, {"text_offset", std::move(offsets)},
              {"token_ids", std::move(ids)},    {"token_bytes", std::move(bytes)}};
}

namespace {

json Envelope(const CompletionMeta& meta, const char* object) {
  json j{{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
  if (!meta.session_id.empty()) j["session_id"] = meta.session_id;
  return j;
}

}  // namespace

json CompletionJson(const CompletionMeta& meta, const std::string& text, const char* finish_reason,
                    const json& logprobs, const GenerateSummary& summary) {
  json j = Envelope(meta, meta.chat ? "chat.completion" : "text_completion");
  json choice{{"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_reason}};
  if (meta.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = UsageJson(summary);
  return j;
}

json ChunkJson(const CompletionMeta& meta, const std::string& text, bool first,
               const char* finish_reason, const json& logprobs, bool include_usage) {
  json j = Envelope(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  json choice{{"index", 0},
              {"logprobs", logprobs},
              {"finish_reason", finish_reason != nullptr ? json(finish_reason) : json(nullptr)}};
  if (meta.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || finish_reason == nullptr) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  j["choices"] = json::array({std::move(choice)});
  if (include_usage) j["usage"] = nullptr;
  return j;
}

json UsageChunkJson(const CompletionMeta& meta, const GenerateSummary& summary) {
  json j = Envelope(meta, meta.chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = UsageJson(summary);
  return j;
}

json ModelsJson(const ModelRegistry& models, const std::string& device) {
  json data = json::array();
  for (const auto& m : models.models()) {
    const ModelConfig& c = m->config();
    data.push_back({{"id", m->name},
                    {"object", "model"},
                    {"created", 0},
                    {"owned_by", "flatstate"},
                    {"attention_kind", ModelKindName(c)},
                    {"architecture", c.architecture},
                    {"num_layers", c.num_hidden_layers},
                    {"num_kv_layers", c.kv_layers()},
                    {"state_bytes_per_session", c.state_bytes()},
                    {"kv_bytes_per_token", m->engine->kv_bytes_per_token()},
                    {"fingerprint", m->fingerprint()},
                    {"vocab_size", c.vocab_size},
                    {"tokenizer", std::string(m->tokenizer().kind())},
                    {"device", device},
                    {"is_default", m->name == models.default_model()}});
  }
  return json{{"object", "list"}, {"data", std::move(data)}};
}

json SessionJson(const SessionInfo& i) {
  return json{{"id", i.session_id},
              {"object", "session"},
              {"session_id", i.session_id},
              {"model", i.model},
              {"attention_kind", i.attention_kind},
              {"context_tokens", i.context_tokens},
              {"state_bytes", i.state_bytes},
              {"generating", i.generating},
              {"evicted", i.evicted}};
}

json CheckpointJson(const CheckpointInfo& c) {
  return json{{"object", "session.checkpoint"},           {"data", absl::Base64Escape(c.data)},
              {"checkpoint_id", c.checkpoint_id},         {"context_tokens", c.context_tokens},
              {"model_fingerprint", c.model_fingerprint}, {"model", c.model}};
}

json ErrorJson(const HttpError& e) {
  return json{{"error",
               {{"message", e.message},
                {"type", e.type},
                {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                {"code", e.code}}}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace flatstate::server
