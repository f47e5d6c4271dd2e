// Transport-neutral request validation, run on the transport threads: everything that can be
// checked without touching a session. Both transports fill the plain GenerateRequest below (gRPC
// from its proto message, server/grpc/grpc_api.h; HTTP from the OpenAI body,
// server/http/openai_request.h) and get the same GenerateJob or the same error.
//
// Stateless; thread-safe. Failures are InvalidArgument (NotFound for a malformed session id) with
// a message naming the field.
#ifndef FLATSTATE_SERVER_API_VALIDATION_H_
#define FLATSTATE_SERVER_API_VALIDATION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/loop_types.h"
#include "server/core/model_registry.h"
#include "server/core/options.h"
#include "server/store/session_store.h"

namespace flatstate::server {

// Sampling params as a transport sends them (flatstate.v1.SamplingParams' fields).
struct SamplingRequest {
  float temperature = 0.f;
  float top_p = 0.f;  // 0: unset, i.e. 1
  uint32_t top_k = 0;
  uint64_t seed = 0;
};

// One Generate call as a transport received it, before validation (the fields of
// flatstate.v1.GenerateRequest; an empty string or list is "not set").
struct GenerateRequest {
  std::string model;       // empty: the session's model or the default model
  std::string session_id;  // empty: a throwaway session
  std::string prompt;      // text; at most one of prompt / prompt_tokens
  std::vector<int32_t> prompt_tokens;
  uint32_t max_new_tokens = 0;  // must be > 0
  std::optional<SamplingRequest> sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // end like EOS, also with ignore_eos; at most 16
  // The checkpoint_id of a stored checkpoint a stateless request starts from instead of an
  // empty state ("initial states"; LoadInitialState reads it). Not with session_id.
  std::string initial_state;
  // Constrained decoding, at most one (docs/grammar.md): GBNF text, a JSON Schema's JSON text,
  // or any JSON object. ValidateGenerate turns it into GenerateJob::grammar (GBNF).
  std::string grammar;
  std::string json_schema;
  bool json_object = false;
  // Speculative decoding (docs/speculative.md): unset means the server's default; 0 draft
  // tokens means the server's --max_draft_tokens, else at most kMaxDraftTokens.
  std::optional<bool> speculative;
  uint32_t max_draft_tokens = 0;
};

inline constexpr uint32_t kMaxDraftTokens = 32;

// Transport sampling params -> engine sampling params (top_p 0 means "unset" = 1); validated.
absl::StatusOr<SamplingParams> ConvertSampling(const SamplingRequest& p);

absl::StatusOr<GenerateJob> ValidateGenerate(const GenerateRequest& req,
                                             const ModelRegistry& models,
                                             const ServerOptions& options);

// A model name that must be loaded (empty is fine: the default).
absl::Status ValidateModelName(const std::string& model, const ModelRegistry& models);

// A session id that is not 32 lower-case hex characters cannot exist: NotFound.
absl::Status ValidateSessionId(const std::string& id);

// The stored checkpoint `id` (a restore's checkpoint_id), read from `store` on the calling
// transport thread: the I/O stays off the engine loop. InvalidArgument naming checkpoint_id for a
// malformed id, else the store's status (NotFound for an unknown one).
absl::StatusOr<std::string> ReadCheckpointById(const std::string& id, const SessionStore& store);

// A validated request's initial_state (a checkpoint id; empty: nothing to do) read from `store`
// into job->initial_state, on the calling transport thread. Errors name initial_state:
// InvalidArgument for a malformed id, the store's NotFound for an unknown one.
absl::Status LoadInitialState(const std::string& checkpoint_id, const SessionStore& store,
                              GenerateJob* job);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_API_VALIDATION_H_
