// The OpenAI-compatible HTTP API's response side (docs/http-api.md): the JSON bodies of
// completions (whole and as stream chunks), usage, logprobs, the model list, sessions,
// checkpoints and errors. The HTTP API's response shapes are version 1 of its contract.
//
// Stateless functions; thread-safe; never fail (text that is not valid UTF-8 is replaced, tokens
// whose bytes are not whole characters are written as "bytes:\xNN..." with their `bytes`).
#ifndef FLATSTATE_SERVER_HTTP_OPENAI_RESPONSE_H_
#define FLATSTATE_SERVER_HTTP_OPENAI_RESPONSE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/chat/tool_calls.h"
#include "engine/sampling/logprobs.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/api/status_mapping.h"
#include "server/core/loop_types.h"
#include "server/core/model_registry.h"

namespace flatstate::server {

// What every body of one completion shares.
struct CompletionMeta {
  bool chat = false;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  std::string session_id;  // extension; empty: omitted
};
CompletionMeta NewCompletionMeta(bool chat);

// "stop" or "length" for the reasons that end a completion normally.
const char* OpenAiFinishReason(FinishReason r);

nlohmann::json UsageJson(const GenerateSummary& summary);

// OpenAI's tool_calls array: {"id": "call_<hex>", "type": "function", "function": {"name",
// "arguments"}} per call (ids fresh per call), with "index" for stream deltas.
nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index);

// How logprobs name a token: its text when its bytes (Tokenizer::TokenBytes) are valid UTF-8,
// "bytes:\xNN..." when they are not (OpenAI's and llama.cpp's spelling of a partial character),
// "token_id:N" when the tokenizer knows no text for it (IdsOnlyTokenizer).
std::string TokenString(const Tokenizer& tokenizer, int32_t token);

// The logprobs object of a choice, tokens named by `tokenizer`: completions {tokens,
// token_logprobs, top_logprobs, text_offset, token_ids, token_bytes} (offsets from *text_offset,
// which advances by each token's bytes), chat {content: [{token, logprob, bytes, token_id,
// top_logprobs: [{token, logprob, bytes, token_id}]}]}. token_ids / token_bytes / token_id are
// extensions; bytes are the token's raw bytes.
nlohmann::json LogprobsJson(bool chat, const Tokenizer& tokenizer,
                            const std::vector<TokenLogprobs>& lps, size_t* text_offset);

// A whole completion (non-streaming).
nlohmann::json CompletionJson(const CompletionMeta& meta, const std::string& text,
                              const char* finish_reason, const nlohmann::json& logprobs,
                              const GenerateSummary& summary);

// One stream chunk: `text` as the delta (chat: with the role on the first chunk), finish_reason
// when set, usage null (include_usage) or absent.
nlohmann::json ChunkJson(const CompletionMeta& meta, const std::string& text, bool first,
                         const char* finish_reason, const nlohmann::json& logprobs,
                         bool include_usage);
// The last chunk with include_usage: no choices, the usage.
nlohmann::json UsageChunkJson(const CompletionMeta& meta, const GenerateSummary& summary);

// GET /v1/models: {"object": "list", "data": [{id, object, created, owned_by, attention_kind,
// state_bytes_per_session, vocab_size, tokenizer ("bytes" / "ids-only"), ...}]}.
nlohmann::json ModelsJson(const ModelRegistry& models, const std::string& device);

nlohmann::json SessionJson(const SessionInfo& info);
// The checkpoint bytes as base64 in "data".
nlohmann::json CheckpointJson(const CheckpointInfo& info);

// {"error": {"message", "type", "param" (null when empty), "code"}}.
nlohmann::json ErrorJson(const HttpError& e);

// `j` as compact JSON; invalid UTF-8 in strings is replaced with U+FFFD.
std::string Dump(const nlohmann::json& j);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_OPENAI_RESPONSE_H_
