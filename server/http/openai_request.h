// The OpenAI-compatible HTTP API's request side (docs/http-api.md): parses a JSON body of
// POST /v1/completions or /v1/chat/completions into an OpenAiRequest (types and shapes only), and
// turns one into the GenerateJob the engine loop runs through the transport-neutral validation
// both transports share (GenerateRequest -> ValidateGenerate, server/api/validation.h): the HTTP
// API adds no limits of its own and touches no proto message. Chat messages become
// prompt text with the model's ChatTemplate (chat_format.h).
//
// Stateless functions; thread-safe. Failures are InvalidArgument whose message starts with the
// OpenAI field name ("max_tokens: ...", "messages[1].role: ..."), so ToHttpError names it.
#ifndef FLATSTATE_SERVER_HTTP_OPENAI_REQUEST_H_
#define FLATSTATE_SERVER_HTTP_OPENAI_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/model.h"
#include "nlohmann/json.hpp"
#include "server/core/loop_types.h"
#include "server/core/model_registry.h"
#include "server/core/options.h"
#include "server/http/chat_format.h"
#include "server/http/response_format.h"

namespace flatstate::server {

inline constexpr uint32_t kDefaultCompletionMaxTokens = 16;  // OpenAI's default
inline constexpr uint32_t kDefaultChatMaxTokens = 256;
inline constexpr int kMaxChoices = 16;  // the most choices (`n`) one request may ask for

struct OpenAiRequest {
  bool chat = false;
  std::string model;       // empty: the session's model or the default model
  std::string session_id;  // extension: continue this session
  std::string initial_state;  // extension: a stored checkpoint's id to start from (stateless)
  std::string prompt;      // completions, as text
  // completions, as token ids (`prompt` an array of integers, or of one such array); then
  // prompt_is_tokens and `prompt` is empty.
  std::vector<int32_t> prompt_tokens;
  bool prompt_is_tokens = false;
  std::vector<ChatMessage> messages;  // chat, for a model's ChatTemplate config (chat_format.h)
  // The first message a ChatTemplate config cannot render (a role other than system, developer,
  // user, assistant): "messages[i].role: ..."; empty when there is none. A model with a Jinja chat
  // template renders every role its template knows.
  std::string config_template_error;
  // chat, as sent (object key order kept), for a model's Jinja chat template (engine/chat/
  // chat_prompt.h): the messages (a null or absent content as "", chat_template_input.h),
  // `tools` (function tools, checked there; null: none), `chat_template_kwargs` ({}: none) and
  // add_generation_prompt (vLLM's extension; default true).
  nlohmann::ordered_json chat_messages;
  nlohmann::ordered_json tools;
  bool tool_choice_none = false;  // tool_choice "none": the reply is not parsed for tool calls
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = true;
  // Choices: each one a fork of the prefilled prompt, choice i sampling with seed + i
  // (EngineLoop::GenerateChoices); 1..kMaxChoices; > 1 only without session_id.
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::optional<int64_t> max_tokens;
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  // completions: logprobs = k (0..20); chat: logprobs = true with top_logprobs = k. -1: none.
  int logprobs = -1;
  std::vector<int32_t> stop_token_ids;  // extension (vLLM's): ids that end the reply like EOS
  bool ignore_eos = false;  // extension (vLLM's): generate past the model's end-of-sequence ids
  // extension (vLLM's): each choice also carries the generated ids ("token_ids"). Always on for a
  // model whose tokenizer knows no text (its text is empty).
  bool return_token_ids = false;
  StructuredOutput structured;  // response_format / grammar (response_format.h)
  // Extension: speculative decoding with prompt lookup (docs/speculative.md); unset: the server's.
  std::optional<bool> speculative;
  int64_t max_draft_tokens = 0;  // extension: tokens per draft, 0: the server's
};

// Parses the body; unknown fields (and `user`) are ignored as OpenAI does. A completions `prompt`
// is a string, an array of one string, an array of token ids or an array of one such array.
// `n` outside [1, kMaxChoices], `echo`, `suffix`, `best_of` > 1 and `functions` are refused
// naming the field (tools are passed to the model's chat template; tool-call parsing of the
// output is not done here). `response_format`, `grammar` and `tool_choice`: response_format.h;
// a forced tool call (tool_choice "required" or a named function) becomes the job's grammar in
// ToGenerateJobFor, for a model whose chat template teaches a call form.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(absl::string_view body, bool chat);

// The prompt text (completions: as sent; chat: the messages rendered with `tmpl`) and the job,
// validated by ValidateGenerate; a chat job always stops at the template's stop strings too.
// Messages of validation errors are renamed to the OpenAI fields (RenameParamForHttp).
absl::StatusOr<GenerateJob> ToGenerateJob(const OpenAiRequest& req, const ChatTemplate& tmpl,
                                          const ModelRegistry& models,
                                          const ServerOptions& options);

// The job for `model`: a chat request is rendered with the model's Jinja chat template into
// prompt token ids when it has one (no stop strings added: the model's end-of-sequence ids end the
// reply); flatstate's own models use their ChatTemplate config (ToGenerateJob above); any other
// model refuses chat with InvalidArgument "messages: model '...' has no chat template ...", as it
// refuses a template that does not compile or render (its error, with the template line).
absl::StatusOr<GenerateJob> ToGenerateJobFor(const OpenAiRequest& req, const Model& model,
                                             const ModelRegistry& models,
                                             const ServerOptions& options);

// The prompt text a chat request becomes for `model` (POST /apply-template): its Jinja chat
// template's rendering, or its ChatTemplate config's; errors as ToGenerateJobFor.
absl::StatusOr<std::string> ChatPromptText(const OpenAiRequest& req, const Model& model);
// Which chat path `model` takes: its ChatPrompt, or nullptr for its ChatTemplate config (the
// request's roles and tools checked for it); errors as ToGenerateJobFor.
absl::StatusOr<const ChatPrompt*> ChatPromptFor(const OpenAiRequest& req, const Model& model);

// The OpenAI name of a field the shared validation names ("max_new_tokens" -> "max_tokens",
// "sampling.temperature" -> "temperature", "stop[0]" -> "stop", ...); others unchanged.
std::string RenameParamForHttp(absl::string_view param, bool chat);

// Parses an optional JSON object body for the session endpoints (empty body: {}); InvalidArgument
// when it is not an object. Fills `sampling` when any sampling field is present.
struct SessionRequest {
  std::string model;
  std::optional<SamplingParams> sampling;
  std::string data;           // restore: the checkpoint bytes (sent as base64)
  std::string checkpoint_id;  // restore: a stored checkpoint
};
absl::StatusOr<SessionRequest> ParseSessionRequest(absl::string_view body);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_HTTP_OPENAI_REQUEST_H_
