// Plain value types the engine loop exchanges with its callers (the gRPC service, tests): a
// Generate job, its finish reason and summary, the TokenSink that receives a stream's output, and
// the answers of the unary operations. No behaviour beyond FinishReasonName; no gRPC.
#ifndef FLATSTATE_SERVER_CORE_LOOP_TYPES_H_
#define FLATSTATE_SERVER_CORE_LOOP_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/cache/prefix_cache.h"
#include "engine/sampling/logprobs.h"
#include "engine/sampling/sampler.h"

namespace flatstate::server {

// Why a Generate stream ended. Each maps to its own flatstate.v1.FinishReason (docs/server.md).
enum class FinishReason {
  kLength,       // max_new_tokens generated (status OK)
  kStop,         // a stop string was generated (status OK)
  kEos,          // the model sampled an end-of-sequence token (status OK; the token is not sent)
  kCancelled,    // the client cancelled or its deadline passed (status CANCELLED)
  kShutdown,     // the server is shutting down (status UNAVAILABLE)
  kKvPoolFull,   // the model's KV block pool cannot hold the stream (RESOURCE_EXHAUSTED)
  kEngineError,  // the engine failed the stream's step (the engine's status)
  kRejected,     // refused before it ran: unknown session or model, capacity, bad input
};
// "LENGTH", "STOP", "EOS", "CANCELLED", "SHUTDOWN", "KV_POOL_FULL", "ENGINE_ERROR", "REJECTED".
const char* FinishReasonName(FinishReason r);

struct GenerateSummary {
  std::string session_id;
  std::string model;
  FinishReason reason = FinishReason::kLength;
  uint64_t prompt_tokens = 0;
  uint64_t cached_prompt_tokens = 0;  // of those, restored from the prefix cache, not prefilled
  uint64_t generated_tokens = 0;
  uint64_t context_tokens = 0;
  uint64_t state_bytes = 0;
  uint64_t decode_us = 0;  // first generated token to the last, in the engine loop (Usage.decode_us)
};

// Receives one Generate stream's output. Implemented by the gRPC reactor (generate_reactor.h)
// and by tests (tests/server/engine_loop_test.cc records what it receives).
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // Thread-safe; true once the client cancelled or the deadline passed. The loop then stops the
  // stream before its next step.
  virtual bool Cancelled() const = 0;
  // Newly generated tokens and the text they complete (valid UTF-8, possibly empty).
  virtual void OnTokens(std::vector<int32_t> token_ids, std::string text) = 0;
  // Only for a job with logprobs >= 0: the sampled token's log-probabilities, called just before
  // the OnTokens that carries that token.
  virtual void OnLogprobs(const TokenLogprobs& logprobs) { (void)logprobs; }
  // Exactly once per stream, last. `status` is OK for LENGTH/STOP, else the error matching
  // `summary.reason` (the stream may have sent tokens before it).
  virtual void OnFinish(const GenerateSummary& summary, const absl::Status& status) = 0;
};

struct GenerateJob {
  std::string model;       // empty: the session's model or the default model
  std::string session_id;  // empty: throwaway session
  std::vector<int32_t> prompt;
  // Prompt text the loop encodes with the session's model tokenizer (then appended to `prompt`,
  // which is empty): set when the text continues a session whose model validation could not know
  // (no `model` in the request). Unset: `prompt` is the whole input.
  std::optional<std::string> prompt_text;
  uint32_t max_new_tokens = 1;
  std::optional<SamplingParams> sampling;
  std::vector<std::string> stop;
  // >= 0: report each sampled token's log-probability and this many alternatives
  // (TokenSink::OnLogprobs); < 0: none.
  int logprobs = -1;
  bool ignore_eos = false;  // generate past the model's end-of-sequence tokens
  // Ids that end the stream like an end-of-sequence id (FinishReason::kEos), also with
  // ignore_eos: the request's stop_token_ids and a chat template's end-of-turn token.
  std::vector<int32_t> stop_token_ids;
  // A stateless job's starting state: the bytes of a checkpoint (GenerateRequest::initial_state,
  // read by LoadInitialState) the throwaway session is restored from before the prompt runs. Its
  // model is the checkpoint's; the job's sampling params, when set, replace the checkpoint's.
  std::optional<std::string> initial_state;
  // Constrained decoding: the GBNF text this job's output must match (validated; compiled by the
  // model's engine, Engine::SetGrammar). Unset: none, except that a job with no prompt on a
  // session whose last output stopped mid-grammar continues under that grammar.
  std::optional<std::string> grammar;
  // Speculative decoding with prompt lookup (docs/speculative.md): up to this many drafted tokens
  // verified per step; 0: off. The output does not depend on it.
  int max_draft_tokens = 0;
  absl::Time arrival = absl::Now();
};

struct SessionInfo {
  std::string session_id;
  std::string model;
  std::string attention_kind;
  uint64_t context_tokens = 0;
  uint64_t state_bytes = 0;
  bool generating = false;
  bool evicted = false;
};

struct CheckpointInfo {
  std::string data;
  std::string checkpoint_id;
  uint64_t context_tokens = 0;
  std::string model_fingerprint;
  std::string model;
};

struct StatsInfo {
  uint64_t active_sessions = 0;  // in memory
  uint64_t evicted_sessions = 0;
  uint64_t active_streams = 0;
  uint64_t state_bytes_total = 0;
  uint64_t kv_blocks_used = 0;  // held by sessions: not those only the prefix cache holds
  uint64_t kv_blocks_total = 0;
  uint64_t tokens_generated_total = 0;
  // The device's memory as its driver reports it (Engine::DeviceMemory; 0 on the CPU or when the
  // query failed) and the part of it held for linear session states (CUDA slot pages).
  uint64_t device_memory_used_bytes = 0;
  uint64_t device_memory_total_bytes = 0;
  uint64_t device_state_bytes = 0;
  // Prefix cache, summed over the models (Engine::prefix_cache_stats).
  PrefixCacheStats prefix_cache;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_CORE_LOOP_TYPES_H_
