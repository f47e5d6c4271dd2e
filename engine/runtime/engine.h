// Engine: one loaded model with its KV block pool, thread pool and forward pass; creates,
// advances, checkpoints and restores sessions. The unit the server's engine loop drives.
//
// Owns the Model, the KvBlockPool (softmax layers), the ThreadPool (unless one is shared through
// EngineOptions::thread_pool) and the ForwardPass. Sessions are
// SessionState values owned by the caller; the engine only touches the sessions passed to a call.
// Not thread-safe: one thread (the engine loop, or a CLI/test) calls it.
//
// Generation protocol. A session's context is `position` tokens already run plus `pending` tokens
// not yet run. Append() adds prompt tokens to `pending`. Step() runs, for each request, up to
// max_tokens pending tokens (prefill splits fall on absolute multiples of the chunk size,
// ChunkGridTokens in step_plan.h, so the floats never depend on the token budget); when a
// request's pending tokens are all consumed and it asked to sample, the next token is drawn with
// the session's sampler and RNG and becomes the new pending token. So a checkpoint taken between
// steps continues exactly.
//
// Admission is per request (vLLM's allocate_slots answers per request too): Step reserves each
// softmax request's KV blocks (CUDA linear: its device state slot) in request order; a request
// that cannot get them, or whose context (run and still pending) would pass
// max_position_embeddings, gets its own status and
// does not run, the others do. If the forward pass fails, every block this step reserved goes
// back to the pool (each table back to its old size) and every request that was to run carries
// that error, its session unchanged (save after a device fault; see device_forward.h). A session
// may be in one request of a step only: a repeat gets InvalidArgument and does not run.
//
// Prefix cache (EngineOptions::prefix_cache_bytes > 0; engine/cache/prefix_cache.h). Stateless
// clients resend a whole conversation every turn; AppendPrompt on a fresh session looks up the
// longest prefix of the prompt, ending on the cache grid and leaving at least one token to run,
// that an earlier prompt snapshotted, restores it (linear: the state; softmax: shares its KV
// blocks) and leaves only the rest pending. When the session then reaches its own prompt's last
// grid point, Step snapshots it (linear: that point only; softmax: every grid point of the
// prompt, which costs only block references). The grid is the chunk size (softmax: the least
// common multiple of chunk and KV block size). Snapshots are only ever taken where a prefill
// step ends on the grid (ChunkGridTokens, step_plan.h, stops a prompt's run at its last grid
// point), so a restored state is bit for bit the state a prefill from token 0 computes, and the
// outputs are the same bits with and without the cache. The end of the generated reply is not
// snapshotted: decoded tokens' state differs in rounding from the prefill of the same tokens
// that a cache-less run does when the client resends them. Softmax: the scheduler may count the
// blocks only the cache holds as free (KvBlocksAvailable); admission drops cache entries, least
// recently used first, when it needs them.
#ifndef FLATSTATE_ENGINE_RUNTIME_ENGINE_H_
#define FLATSTATE_ENGINE_RUNTIME_ENGINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/cache/prefix_cache.h"
#include "engine/kv/kv_block_pool.h"
#include "engine/model/model.h"
#include "engine/runtime/forward.h"
#include "engine/sampling/logprobs.h"
#include "engine/session/checkpoint.h"
#include "engine/session/session_state.h"
#include "engine/util/thread_pool.h"
#include "kernels/device.h"
#include "kernels/gemm.h"

namespace flatstate {

// KV blocks per softmax model unless configured (the server's --kv_blocks default too).
inline constexpr int kDefaultKvBlocks = 16384;

struct EngineOptions {
  Device device = Device::kCpu;
  int threads = 0;  // 0: all hardware threads (ignored with thread_pool)
  // A pool shared with other engines (not owned; must outlive the engine): a server runs every
  // model's steps on one pool from its one engine loop thread, so batches of different models
  // never oversubscribe the cores (LevelDB's Env, injected). Null: the engine makes its own pool
  // of `threads` threads.
  ThreadPool* thread_pool = nullptr;
  int kv_blocks = kDefaultKvBlocks;  // softmax only: blocks in the pool
  int kv_block_size = 16;            // tokens per block
  int chunk_size = 0;                // 0: the model's config value
  // CUDA: GEMMs by the fixed-order kernel (kernels/gemm.h), so a session's outputs are the same
  // bits whatever shares its step, at some speed (docs/gpu.md). The CPU is always so.
  bool batch_invariant = false;
  // Bytes the prefix cache may hold (see above); 0: no cache.
  size_t prefix_cache_bytes = 0;
  // The type the layers' GEMM weights (wqkv, wo, w1, w2) are prepared as at load (kernels/gemm.h;
  // docs/model-format.md says which tensors stay fp32). Unset: the file's own type (f32 for a
  // torch_dtype float32 file, bf16 for a bfloat16 one, int8 / int4 for those). From an F32 file
  // every type is quantised from the fp32 values; from a BF16 file f32 widens exactly (the same
  // bits as bf16 on the CPU, at twice the memory), bf16 uses the stored bits, int8/int4 quantise
  // the widened values. From an int8 / int4 file its own type uses the stored quants and scales
  // (the bits of its F32 original at that type), f32 and bf16 start from the dequantised values
  // float(q) * scale, and the other integer type is refused (Engine::Create: InvalidArgument).
  std::optional<WeightDtype> weight_dtype;
  // The output head's type (vocab x hidden), prepared from its f32 values at load. Unset: f32, or
  // bf16 when the layers run narrower than f32 and the head is exactly bf16 (a BF16 file's).
  // int8 is what llama.cpp's Q8_0 files do with the head; on a large vocabulary it is a third of
  // the bytes a decode step reads (docs/model-format.md). Sessions continue only on an engine with
  // the same head type (fingerprint).
  std::optional<WeightDtype> head_dtype;
  // Softmax only: the K/V cache's element type (kernels/paged_attention.h). bf16 halves the KV
  // bytes per token (and what a decode step reads); CUDA: f32 only so far (Unimplemented).
  KvDtype kv_dtype = KvDtype::kF32;
};

// The weight type a file of `torch_dtype` runs as under --weight_dtype auto (float32: f32,
// bfloat16: bf16, int8: int8, int4: int4; bf16dot is only ever asked for).
WeightDtype StoredWeightDtype(TorchDtype torch_dtype);

// --weight_dtype (and --head_dtype: `field` names the option in the error): "auto" (or empty):
// unset, the file's own type (the head: the default rule); else ParseWeightDtype's names.
// InvalidArgument naming the field and the accepted values otherwise.
absl::StatusOr<std::optional<WeightDtype>> ParseWeightDtypeOption(
    absl::string_view name, absl::string_view field = "weight_dtype");

// The vocabulary constrained decoding masks for `model`: every token's bytes (its tokenizer's
// TokenBytes) in a byte trie without the tokenizer's special ids, and the model's EOS ids (allowed
// once a grammar is complete). FailedPrecondition for a tokenizer that knows no text.
absl::StatusOr<std::shared_ptr<const GrammarVocabulary>> BuildGrammarVocabulary(const Model& model);

// Constrained decoding (docs/grammar.md). A session with a grammar (SessionState::grammar) draws
// from its logits row with every token the grammar's state does not allow set to -inf (EOS ids
// only once the grammar is complete), then advances the state by the token's bytes; the mask
// depends only on that state, so a session's tokens are the same bits in any batch. Its logprobs
// are those of the masked distribution (top entries only among the allowed tokens). n > 1
// choices fork the grammar state with the session and draw from the same masked row. A step in
// which nothing is allowed fails that request (FailedPrecondition), its session unchanged but
// for the tokens run.
// One session's part of a step. A session may appear in at most one request of a step.
struct StepRequest {
  SessionState* session = nullptr;
  int64_t max_tokens = 1 << 30;  // pending tokens this step may run
  bool sample = true;            // draw the next token once pending is empty
  // >= 0: also report the sampled token's log-probability and the `logprobs` most likely tokens
  // with theirs (StepResult::logprobs; ComputeLogprobs, logprobs.h). < 0: none.
  int logprobs = -1;
  // n > 1 choices of one prompt: fresh sessions (NewSession: nothing run, no KV blocks) that,
  // when this request samples, each become a fork of `session` (Fork) taken after its pending
  // tokens ran, and draw their own token from the same logits with their own sampler and RNG
  // (kept through the fork). So choice k is the bits of a session with its sampler that
  // prefilled the prompt alone, at the cost of one prefill. Untouched when the request does not
  // sample this step.
  std::span<SessionState* const> choices = {};
  // Speculative decoding (docs/speculative.md): tokens proposed to follow the session's pending
  // token (a prompt-lookup drafter's guess). Used when the session is decoding (one pending
  // token), the request samples, has no choices and the session no prefix-cache marks, on the
  // CPU: the step runs the pending token and the draft as one stepwise run
  // (SequenceRun::stepwise: every token gets a decode step's floats, the GEMMs take all rows at
  // once) and draws from its rows in order with the session's sampler, RNG and grammar, as
  // successive plain steps would: a draw equal to the draft's next token accepts it and goes on;
  // the first draw that differs, completes the grammar, is an EOS id or comes from the last row
  // ends the step. The session is left exactly as after those plain steps: softmax layers drop
  // the rows past the kept tokens; recurrent states take the run's record of the state after the
  // last kept token (SequenceRun::steps: each op records the parts it advances after every
  // token), so nothing runs twice. So tokens, logprobs, states and checkpoints are the
  // bits of decoding without a draft. A draft past max_position_embeddings is cut there. It is
  // ignored (a plain step; StepResult::drafted 0) when the request is not as above, when the KV
  // blocks for its rows are not there, or when a draft token is out of range.
  std::span<const int32_t> draft = {};
};

// One choice's draw (StepRequest::choices): its fork's status, then its token like StepResult's.
struct ChoiceDraw {
  absl::Status status;
  int32_t token = -1;
  TokenLogprobs logprobs;
  bool grammar_done = false;  // as StepResult::grammar_done, for the choice's session
};

struct StepResult {
  // OK, or why this request did not run (ResourceExhausted: no KV blocks; OutOfRange: past
  // max_position_embeddings; InvalidArgument: no session; else the forward pass's error).
  absl::Status status;
  int64_t consumed = 0;  // pending tokens run this step
  bool sampled = false;
  int32_t token = -1;      // the sampled token (now the session's only pending token)
  TokenLogprobs logprobs;  // when sampled and the request asked for them
  // When sampled under a grammar (SessionState::grammar): the token completed it and nothing more
  // may follow (or it was an EOS id); the session's grammar is cleared. The caller ends the
  // output there (finish_reason "stop").
  bool grammar_done = false;
  // When sampled: one draw per StepRequest::choices entry, in order.
  std::vector<ChoiceDraw> choices;
  // A speculative step (StepRequest::draft): the drafted tokens drawn and accepted, in order,
  // before `token` (the step's last draw), with their logprobs when the request asked; `drafted`
  // is how many drafted tokens the step verified (0: it ran as a plain step).
  std::vector<int32_t> accepted;
  std::vector<TokenLogprobs> accepted_logprobs;
  int drafted = 0;
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                        const EngineOptions& options);
  ~Engine();

  const Model& model() const { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  Device device() const { return options_.device; }
  // The type the layers' GEMM weights run as (EngineOptions::weight_dtype, or the file's own).
  WeightDtype weight_dtype() const { return weight_dtype_; }
  // Softmax: K/V bytes one token holds in this engine's pool (its KvDtype); 0 for the others.
  size_t kv_bytes_per_token() const {
    return kv_ == nullptr ? 0 : kv_->bytes_per_block() / static_cast<size_t>(kv_->block_size());
  }
  // What this engine computes with: Model::fingerprint() (over the file bytes, so an F32 model and
  // its BF16 export differ), followed by "-bf16", "-int8" or "-int4" when weight_dtype() is not
  // f32, "-head-<type>" when EngineOptions::head_dtype is set and, for softmax, "-kv-bf16" with a
  // bf16 K/V cache. Checkpoints carry it, so a session continues only on an engine of the same
  // model file, weight type, head type and cache type (Restore:
  // FailedPrecondition), even where two would compute the same bits (a BF16 file run as f32 or as
  // bf16 on the CPU; an F32 file run as bf16 and its BF16 export).
  const std::string& fingerprint() const { return ckpt_model_.fingerprint; }
  int chunk_size() const { return forward_->chunk_size(); }
  KvBlockPool* kv_pool() { return kv_.get(); }  // null for linear kinds
  // Free KV blocks plus those only the prefix cache holds (admission frees them on demand): what
  // a scheduler may plan with. 0 for linear kinds.
  int64_t KvBlocksAvailable() const;
  // The prefix cache's counters; all zero (budget 0) without a cache.
  PrefixCacheStats prefix_cache_stats() const;
  // Tokens per prefix-cache grid step (see above).
  int64_t prefix_grid() const { return prefix_grid_; }

  // Bytes of per-session state: the recurrent state (linear) or KV bytes in use (softmax).
  size_t SessionBytes(const SessionState& s) const;

  SessionState NewSession(const SamplingParams& sampling) const;
  // The grammar for GBNF text `gbnf` over this model's vocabulary, from the engine's cache
  // (compiled at its first use; the vocabulary's byte trie at the first grammar of the engine).
  // InvalidArgument "grammar: GBNF <line>:<column>: ..." for a bad grammar; FailedPrecondition
  // for a model whose tokenizer knows no text.
  absl::StatusOr<std::shared_ptr<const GrammarConstraint>> CompileGrammar(std::string_view gbnf);
  // `gbnf` at its start, for SessionState::grammar: what a session samples from then on is
  // constrained by it. Fails like CompileGrammar.
  absl::StatusOr<SessionGrammar> StartGrammar(std::string_view gbnf);
  // Returns the session's KV blocks to the pool and frees its device state slot (CUDA linear).
  // The state must not be used afterwards.
  void ReleaseSession(SessionState* s);
  // Makes the session's host copy current: CUDA linear kinds copy the session's device slot into
  // `linear` (which is otherwise only as new as the last such call; see SessionState), CUDA
  // softmax copies its KV blocks into the host pool; nothing on the CPU. Call it before reading
  // `linear` or copying a SessionState. Fails with the device's error.
  absl::Status SyncToHost(SessionState* s);
  // Device memory held for linear session states (CUDA slot pages); 0 on the CPU and for softmax.
  size_t DeviceStateBytes() const;
  // The memory of the device this engine runs on, as its driver reports it for the whole device
  // (all processes): {0, 0} on the CPU, whose memory is the process's RSS. Fails with the
  // device's error.
  absl::StatusOr<DeviceMemoryInfo> DeviceMemory() const;

  // Validates token ids and appends them to the session's pending input. InvalidArgument like
  // "token 300 at index 3 is out of range [0, 256)" (nothing appended) otherwise.
  absl::Status Append(SessionState* s, std::span<const int32_t> tokens) const;
  // Append for a turn's prompt, using the prefix cache (see above) when there is one and `s` is
  // fresh (nothing run, nothing pending). Returns the prompt tokens restored from the cache
  // (0 otherwise); those are counted as run. Fails like Append, with `s` unchanged.
  absl::StatusOr<int64_t> AppendPrompt(SessionState* s, std::span<const int32_t> prompt);

  // How many pending tokens of `s` a step with budget `budget` runs: ChunkGridTokens
  // (step_plan.h) with this engine's chunk size.
  int64_t PlanTokens(const SessionState& s, int64_t budget) const;

  // Runs one batched step (see the protocol and admission above). `results` gets one entry per
  // request, each with its own status. Returns OK iff every result's status is OK, else the first
  // failing one's status prefixed with its index ("request 2: ...") as a summary: the other
  // requests ran all the same.
  absl::Status Step(std::span<const StepRequest> requests, std::vector<StepResult>* results);

  // Runs `tokens` for one session and returns the logits of every one (tests and tools).
  absl::StatusOr<std::vector<float>> Score(SessionState* s, std::span<const int32_t> tokens);

  // Not const: on CUDA it first copies the session's KV blocks from the device into the pool, or
  // its linear state from its device slot (into a copy: `s` itself is not changed).
  absl::StatusOr<std::string> Checkpoint(const SessionState& s);
  absl::StatusOr<SessionState> Restore(std::string_view blob);
  // A second session that continues exactly as `s` would (the same position, pending tokens,
  // state, sampler, RNG and decoder tail): a branch of the conversation (n > 1, ForkSession).
  // Softmax layers share `s`'s full KV blocks (which no owner writes again) and copy only the
  // partly filled last one; a recurrent state is copied (its fixed size). `s` is synced to the
  // host first (SyncToHost) and is otherwise unchanged; the copy holds no device slot (it gets
  // one at its first step). Fails with ResourceExhausted when the pool has no block for the
  // copied partial block (nothing shared then), or with the device's error.
  absl::StatusOr<SessionState> Fork(SessionState* s);
  // The split checkpoint of `s` for incremental storage (SerializeSessionSplit with
  // KvChunkTokens(config())): only KV chunks holding tokens at or after `first_token`.
  absl::StatusOr<CheckpointSplit> CheckpointSplitFrom(const SessionState& s, int64_t first_token);

 private:
  Engine() = default;
  // Per-request admission of a run of `tokens` for `s`: max_position_embeddings (softmax), then
  // its KV blocks. On failure the session is unchanged.
  absl::Status Admit(SessionState* s, int64_t tokens);
  absl::Status ValidateTokens(std::span<const int32_t> tokens) const;
  // Stores the prefix-cache snapshots `s` is marked for, if it has reached them.
  void MaybeSnapshot(SessionState* s);
  // StepRequest::choices of a request about to sample: each fresh session becomes a fork of
  // its session, keeping its own sampler and RNG; result->choices gets one status per choice.
  void ForkChoices(const StepRequest& request, StepResult* result);
  // Draws request's token (and its choices') from `logits` (one row), masked by the session's
  // grammar when it has one, and advances the grammars (engine_sample.cc). Thread-safe across
  // distinct requests.
  void Draw(const StepRequest& request, const float* logits, StepResult* result,
            SamplerScratch* scratch) const;
  // StepRequest::draft when the step may verify it for `s` (see there; `planned`: the tokens the
  // request runs otherwise), else empty.
  std::span<const int32_t> UsableDraft(const StepRequest& request, const SessionState& s,
                                       int64_t planned) const;
  // A speculative run's draws: row j of `rows` (the run's logits, one per token) is the
  // distribution after the pending token and draft[0..j); fills `result` (accepted, token,
  // logprobs, grammar_done, sampled or the status) as StepRequest::draft says.
  void DrawVerified(const StepRequest& request, std::span<const int32_t> draft, const float* rows,
                    StepResult* result, SamplerScratch* scratch) const;
  // After the draws: every speculative run that kept fewer tokens than it ran goes back to the
  // state after those it kept (see StepRequest::draft): KV rows past them dropped, the recurrent
  // state copied from the run's record of it after the last kept token. Cannot fail.
  void SettleSpeculation(std::span<const StepRequest> requests, std::vector<StepResult>* results);
  // `s` with a current host copy: `s` itself, or (CUDA linear, slot newer than `linear`) a copy
  // in host_view_ refreshed from the slot, valid until the next call.
  absl::StatusOr<const SessionState*> HostView(const SessionState& s);

  std::unique_ptr<Model> model_;
  EngineOptions options_;
  WeightDtype weight_dtype_ = WeightDtype::kF32;  // options_.weight_dtype resolved
  std::unique_ptr<ThreadPool> owned_pool_;        // null when EngineOptions::thread_pool is shared
  ThreadPool* pool_ = nullptr;  // the pool steps run on: owned_pool_ or the shared one
  std::unique_ptr<Parallel> parallel_;
  std::unique_ptr<KvBlockPool> kv_;
  std::unique_ptr<PrefixCache> cache_;  // after kv_: destroyed first, dropping its references
  int64_t prefix_grid_ = 0;
  std::unique_ptr<ForwardPass> forward_;
  std::unique_ptr<GrammarCache> grammars_;
  CheckpointModel ckpt_model_;
  std::vector<float> logits_;
  // Step's scratch, kept to avoid reallocating every step.
  std::vector<SequenceRun> runs_;
  std::vector<size_t> run_of_;                              // request index per run
  std::vector<std::pair<SessionState*, size_t>> reserved_;  // grown table, old size
  std::vector<size_t> sampled_runs_;                        // runs that draw a token
  absl::flat_hash_set<const SessionState*> step_sessions_;  // sessions seen in this step
  // This step's speculative runs: what ran and what to go back to.
  struct Speculation {
    size_t run = 0;                // index into runs_
    std::vector<int32_t> tokens;   // the pending token, then the draft
    size_t steps_offset = 0;       // its records in spec_steps_: the state after each token
                                   // but the last (SequenceRun::steps)
    int64_t position = 0;          // before the run
    size_t table_before = 0;       // KV table size before the run
  };
  std::vector<Speculation> spec_;
  // The speculative runs' state records, kept at the largest step's size (drafted tokens x
  // state_floats() floats) rather than allocated every step.
  std::vector<float> spec_steps_;
  std::vector<int> spec_of_run_;      // per run: its index in spec_, -1 for plain runs
  std::vector<int64_t> first_row_;    // per run: its first row of logits_
  SessionState host_view_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_ENGINE_H_
