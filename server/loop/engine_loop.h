// EngineLoop: the one thread that runs the models. It runs the parts that decide and keep
// things (ModelRegistry, SessionTable, Scheduler) and emits the results; it knows nothing of
// gRPC: output goes out through TokenSink (loop_types.h) and callbacks.
//
// Ownership: owns the ModelRegistry (the engines), the SessionStore, the SessionTable and every
// Generate stream. `metrics` is borrowed and must outlive the loop.
//
// Threading. Public methods are thread-safe: they post a closure to a queue (absl::Mutex +
// CondVar) and return at once; the loop thread runs queued closures between engine steps.
// models() and store() may be used from any thread (both are thread-safe themselves). Every
// callback and every TokenSink method is invoked on the loop thread and must not block.
//
// One iteration: run queued closures (admit new streams, unary ops), drop cancelled streams, then
// for each model with active streams ask the Scheduler for the step plan (scheduler.h: decodes
// first, prefills share what is left of --step_token_budget on the chunk grid, per-stream KV
// admission; a decoding stream with speculative decoding on also carries its draft, paced by
// the measured cost of steps by rows, docs/speculative.md), run Engine::Step over the streams that
// run, emit each sampled token (a speculative step's accepted drafts first; stream_text.h
// detokenises and matches stop strings), and end each stream that finished, alone: a stream whose
// KV blocks will not come back ends with RESOURCE_EXHAUSTED (FinishReason::kKvPoolFull), one the
// engine failed with the engine's status (kEngineError); the others go on. Then idle sessions are
// evicted (SessionTable::MaybeEvictIdle), gauges are published and MemoryTrimmer::Maybe runs.
//
// Failures are absl statuses passed to the callback / TokenSink::OnFinish; codes per
// docs/server.md.
#ifndef FLATSTATE_SERVER_LOOP_ENGINE_LOOP_H_
#define FLATSTATE_SERVER_LOOP_ENGINE_LOOP_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/speculate/drafter.h"
#include "engine/speculate/step_cost.h"
#include "server/core/loop_types.h"
#include "server/core/metrics.h"
#include "server/core/model_registry.h"
#include "server/core/options.h"
#include "server/loop/memory_trimmer.h"
#include "server/loop/sampling_override.h"
#include "server/loop/stream_text.h"
#include "server/sessions/lease_keeper.h"
#include "server/sessions/session_table.h"
#include "server/sessions/turn_lease.h"
#include "server/store/session_store.h"

namespace flatstate::server {

class EngineLoop {
 public:
  template <typename T>
  using Callback = std::function<void(absl::StatusOr<T>)>;

  EngineLoop(ModelRegistry models, std::unique_ptr<SessionStore> store,
             const ServerOptions& options, Metrics* metrics);
  ~EngineLoop();  // Stop()

  // Starts the loop thread. Work posted before Start waits in the queue and runs, in order, in
  // the first iteration.
  void Start();
  // Finishes active streams with Unavailable (FinishReason::kShutdown) and rejects new ones;
  // queued closures still run.
  void BeginShutdown();
  // BeginShutdown, run what is queued, join the thread. Idempotent.
  void Stop();

  const ModelRegistry& models() const { return models_; }
  const std::string& default_model() const { return models_.default_model(); }
  SessionStore& store() const { return *store_; }

  void Generate(GenerateJob job, std::shared_ptr<TokenSink> sink);
  void CreateSession(std::string model, std::optional<SamplingParams> sampling,
                     Callback<SessionInfo> done);
  void GetSession(std::string session_id, Callback<SessionInfo> done);
  void DeleteSession(std::string session_id, std::function<void(absl::Status)> done);
  void CheckpointSession(std::string session_id, Callback<CheckpointInfo> done);
  // `blob` is the checkpoint bytes (already read from the store for a checkpoint_id).
  void RestoreSession(std::string blob, Callback<SessionInfo> done);
  // A new session that continues exactly as `session_id` would (SessionTable::Fork): a branch of
  // the conversation. With `sampling`, the branch samples with those params and a fresh RNG
  // seeded from them; without, it draws the same tokens the original would. FailedPrecondition
  // while the original is generating.
  void ForkSession(std::string session_id, std::optional<SamplingParams> sampling,
                   Callback<SessionInfo> done);
  void GetStats(Callback<StatsInfo> done);
  // n > 1 choices of one stateless request (`sinks[i]` gets choice i): the prompt is prefilled
  // once; in the step that samples its first token the engine forks the session for choices
  // 1..n-1 (StepRequest::choices), choice i drawing from the same logits with seed
  // job.sampling.seed + i, so each choice is the same bits as a request of its own with that
  // seed. A job with a session_id is refused (InvalidArgument naming n). A choice that cannot be
  // forked (max_sessions, no KV block) ends alone with that error.
  void GenerateChoices(GenerateJob job, std::vector<std::shared_ptr<TokenSink>> sinks);

 private:
  // Choices 1.. of an n > 1 request, forked from the stream holding them (GenerateChoices).
  struct PendingChoices {
    std::vector<std::shared_ptr<TokenSink>> sinks;  // choice i + 1 gets sinks[i]
    std::vector<std::string> stop;
    uint64_t seed = 0;  // choice i samples with seed + i
  };
  struct Stream {
    Session* session = nullptr;
    std::shared_ptr<TokenSink> sink;
    uint32_t max_new_tokens = 0;
    uint32_t generated = 0;
    uint64_t prompt_tokens = 0;
    uint64_t cached_prompt_tokens = 0;  // of those, restored from the prefix cache
    int logprobs = -1;                  // GenerateJob::logprobs
    std::vector<int32_t> eos;  // the model's end-of-sequence ids (not with ignore_eos) and the job's stop_token_ids
    StreamText text;
    SamplingOverride sampling;
    absl::Time arrival, first_token, last_token;
    bool done = false;
    std::optional<PendingChoices> choices;  // n > 1: the choices still to fork from this stream
    // Speculative decoding (GenerateJob::max_draft_tokens; null when off): the prompt-lookup
    // drafter over the prompt and the tokens emitted, and the longest draft to ask for.
    std::unique_ptr<Drafter> drafter;
    int max_draft = 0;
  };

  static constexpr int kIdleWakeMs = 200;  // idle loop wake-up (eviction scan, memory release)

  void Post(std::function<void()> fn);
  void Run();
  // A throwaway session restored from checkpoint `blob` (GenerateJob::initial_state) of `model`,
  // with `sampling` (when set) instead of the checkpoint's sampler and RNG. Errors name
  // initial_state: DataLoss (corrupt), FailedPrecondition (another model's checkpoint).
  absl::StatusOr<Session*> StartFromState(LoadedModel* model, const std::string& blob,
                                          const std::optional<SamplingParams>& sampling);
  // `more`: the sinks of choices 1.. of an n > 1 request (GenerateChoices).
  void AdmitStream(GenerateJob job, std::shared_ptr<TokenSink> sink,
                   std::vector<std::shared_ptr<TokenSink>> more = {});
  // n > 1: the sessions of `st`'s pending choices, created for the step in which its prompt's
  // last part runs (their states go in StepRequest::choices, `states`); a choice whose session
  // cannot be created ends at once with the error.
  std::vector<Session*> StartChoices(Stream* st, std::vector<SessionState*>* states);
  // After that step: each choice the engine forked becomes a stream of its own with its first
  // token; one it could not fork ends with the error. `sessions` as StartChoices returned them.
  void AdoptChoices(Stream* st, const std::vector<Session*>& sessions, const StepResult& r);
  // The step did not sample `st` (it failed): the choices' sessions go, the choices stay pending.
  void DropChoiceSessions(const std::vector<Session*>& sessions);
  // The session of a turn (Generate, Checkpoint, Delete), resident and current. Shared store: takes
  // its lease into `lease` first (Aborted naming the holder when another replica has it; counted),
  // loads it when this replica does not hold it, reloads it when another replica advanced it.
  // FailedPrecondition `busy` when it is generating here, unless that stream's client has
  // cancelled it: then the stream ends now (EndCancelledTurn) instead of before the next step, so
  // a client that cancels and at once starts its next turn is not refused. On error `lease` holds
  // nothing.
  absl::StatusOr<Session*> FindForTurn(const std::string& id, TurnLease* lease,
                                       absl::string_view busy);
  // Ends (CANCELLED) the stream generating on `session` if its sink says the client cancelled it;
  // true if it did. Runs between steps (loop thread), like everything Posted.
  bool EndCancelledTurn(Session* session);
  // Ends `st` (CANCELLED) if its client cancelled it; true if it did. What StepModel does to each
  // stream before planning a step, and EndCancelledTurn to a session's stream between steps.
  bool FinishIfCancelled(Stream* st);
  // Ends (ABORTED) the streams whose lease keeper_ could not renew. Nothing without a shared
  // store. (A stream's lease is tracked by keeper_ from admission to FinishStream.)
  void EndStreamsThatLostTheirLease();
  // Checks the job against `session` and appends its prompt (Engine::AppendPrompt: a fresh session
  // may start from the prefix cache; `cached_tokens` gets how many tokens it restored); a status
  // to reject it with.
  absl::Status PrepareSession(const GenerateJob& job, Session* session, uint64_t* cached_tokens);
  void StepModel(LoadedModel* model);
  // Emits the step's tokens for `st`: a speculative step's accepted drafts, then r.token; stops
  // at the first that ends the stream.
  void EmitToken(Stream* st, const StepResult& r);
  // One token (EmitToken's body); false once the stream has ended.
  bool EmitOne(Stream* st, int32_t token, const TokenLogprobs& logprobs, bool grammar_done);
  // A stream's drafter for `model`: a DraftModelDrafter on --draft_model's engine when that model
  // is another with the same vocabulary size, else prompt lookup.
  std::unique_ptr<Drafter> MakeDrafter(const LoadedModel& model, int max_draft);
  // The draft `st` may verify this step (empty: none): its drafter's proposal, given what
  // verification costs in a step of `base_rows` decoding rows and `streams` streams by
  // `*step_cost` (which records the drafting time), no longer than the tokens the stream may
  // still emit less one, cut before any end-of-sequence id and before the token that would
  // complete a stop string, and only if its KV rows fit in `*spare_blocks` (softmax models;
  // taken from it).
  std::vector<int32_t> DraftFor(Stream* st, Engine* engine, int64_t plan_blocks,
                                int64_t* spare_blocks, StepCostModel* step_cost, int base_rows,
                                int streams);
  // Ends `st` (restores sampling, reports, frees a throwaway session); `st` is erased later.
  void FinishStream(Stream* st, FinishReason reason, const absl::Status& status);
  void ReapFinished();
  // Everything but the device memory, which DeviceMemory reads (a driver call; {0, 0} on the
  // CPU or when the query fails).
  StatsInfo Stats() const;
  DeviceMemoryInfo DeviceMemory() const;
  void PublishGauges();

  ModelRegistry models_;
  const std::unique_ptr<SessionStore> store_;
  const ServerOptions options_;
  Metrics* const metrics_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;

  // Loop thread only.
  bool draining_ = false;
  SessionTable sessions_;
  std::vector<std::unique_ptr<Stream>> streams_;  // arrival order
  MemoryTrimmer trimmer_;
  uint64_t tokens_generated_ = 0;
  // Per model: the measured time of decoding steps by rows (timed in StepModel), which paces
  // speculative drafts (draft_pacer.h).
  absl::flat_hash_map<const LoadedModel*, StepCostModel> step_costs_;
  absl::Time device_memory_published_ = absl::InfinitePast();
  // Renews the streams' leases while steps run (shared stores only; null otherwise). Declared
  // last: destroyed first, while the store it borrows still exists.
  std::unique_ptr<LeaseKeeper> keeper_;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_LOOP_ENGINE_LOOP_H_
