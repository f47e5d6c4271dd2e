// EngineLoop: the one thread that runs the models. It owns every session, advances all active
// Generate streams together (continuous batching) and executes every operation that touches a
// session. Knows nothing of gRPC: results go out through TokenSink and callbacks.
//
// Threading. Public methods are thread-safe: they post a closure to a queue (absl::Mutex +
// CondVar) and return at once; the loop thread runs queued closures between engine steps. Every
// callback and every TokenSink method is invoked on the loop thread and must not block.
//
// One iteration: run queued closures (admit new streams, unary ops), drop cancelled streams, then
// for each model with active streams one Engine::Step over all of them: each decoding stream runs
// its one pending token; prefills share what is left of --step_token_budget, split on the chunk
// grid by Engine::PlanTokens (so outputs do not depend on batch composition); then idle sessions
// past --session_idle_ttl are checkpointed to disk and evicted (restored on their next use).
// On an idle wake-up after activity (at most once a second), and every 10 s while busy, the loop
// calls malloc_trim(0) so glibc hands freed heap pages back to the OS (docs/reliability.md).
//
// Failures are absl statuses passed to the callback / TokenSink::OnFinish; codes per docs/server.md.
#ifndef FLATSTATE_SERVER_ENGINE_LOOP_H_
#define FLATSTATE_SERVER_ENGINE_LOOP_H_

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
#include "engine/runtime/engine.h"
#include "engine/tokenizer/byte_tokenizer.h"
#include "server/checkpoint_store.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/options.h"

namespace flatstate::server {

enum class FinishReason { kLength, kStop, kCancelled };
const char* FinishReasonName(FinishReason r);

struct GenerateSummary {
  std::string session_id;
  std::string model;
  FinishReason reason = FinishReason::kLength;
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t context_tokens = 0;
  uint64_t state_bytes = 0;
};

// Receives one Generate stream's output. Implemented by the gRPC reactor (and by tests).
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // Thread-safe; true once the client cancelled or the deadline passed. The loop then stops the
  // stream before its next step.
  virtual bool Cancelled() const = 0;
  // Newly generated tokens and the text they complete (valid UTF-8, possibly empty).
  virtual void OnTokens(std::vector<int32_t> token_ids, std::string text) = 0;
  // Exactly once per stream, last. `status` is OK for LENGTH/STOP, Cancelled for a cancelled
  // stream, else the error (the stream may have sent tokens before it).
  virtual void OnFinish(const GenerateSummary& summary, const absl::Status& status) = 0;
};

struct GenerateJob {
  std::string model;       // empty: the session's model or the default model
  std::string session_id;  // empty: throwaway session
  std::vector<int32_t> prompt;
  uint32_t max_new_tokens = 1;
  std::optional<SamplingParams> sampling;
  std::vector<std::string> stop;
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
  uint64_t kv_blocks_used = 0;
  uint64_t kv_blocks_total = 0;
  uint64_t tokens_generated_total = 0;
};

class EngineLoop {
 public:
  template <typename T>
  using Callback = std::function<void(absl::StatusOr<T>)>;

  // Takes the loaded models (names unique). `metrics` must outlive the loop.
  EngineLoop(std::vector<std::unique_ptr<LoadedModel>> models, std::string default_model,
             CheckpointStore store, const ServerOptions& options, Metrics* metrics);
  ~EngineLoop();  // Stop()

  void Start();
  // Finishes active streams with Unavailable and rejects new ones; queued closures still run.
  void BeginShutdown();
  // BeginShutdown, run what is queued, join the thread. Idempotent.
  void Stop();

  // Immutable after construction: safe from any thread.
  const std::vector<std::unique_ptr<LoadedModel>>& models() const { return models_; }
  const LoadedModel* FindModel(const std::string& name) const;  // null if unknown
  const std::string& default_model() const { return default_model_; }
  // "a, b" for error messages.
  std::string ModelNames() const;

  void Generate(GenerateJob job, std::shared_ptr<TokenSink> sink);
  void CreateSession(std::string model, std::optional<SamplingParams> sampling,
                     Callback<SessionInfo> done);
  void GetSession(std::string session_id, Callback<SessionInfo> done);
  void DeleteSession(std::string session_id, std::function<void(absl::Status)> done);
  void CheckpointSession(std::string session_id, Callback<CheckpointInfo> done);
  // `blob` is the checkpoint bytes (already read from disk for a checkpoint_id).
  void RestoreSession(std::string blob, Callback<SessionInfo> done);
  void GetStats(Callback<StatsInfo> done);

  const CheckpointStore& store() const { return store_; }

 private:
  struct Stream;
  struct Session {
    std::string id;
    LoadedModel* model = nullptr;
    SessionState state;
    bool resident = true;    // false: evicted to store_.EvictedPath(id)
    bool throwaway = false;  // deleted when its Generate ends
    Stream* stream = nullptr;  // the Generate in progress, if any
    IncrementalDecoder decoder;  // holds an incomplete character between calls
    absl::Time last_used;
    uint64_t evicted_context_tokens = 0;
  };
  struct Stream {
    Session* session = nullptr;
    std::shared_ptr<TokenSink> sink;
    uint32_t max_new_tokens = 0;
    uint32_t generated = 0;
    uint64_t prompt_tokens = 0;
    std::vector<std::string> stop;
    std::string text;  // generated text so far (stop-string matching)
    bool override_sampling = false;
    SamplingParams saved_sampling;
    Rng saved_rng;
    absl::Time arrival, last_token;
    bool done = false;
  };

  static constexpr int kIdleWakeMs = 200;  // idle loop wake-up (eviction scan, memory release)
  static constexpr absl::Duration kBusyTrimInterval = absl::Seconds(10);

  void Post(std::function<void()> fn);
  void Run();
  void AdmitStream(GenerateJob job, std::shared_ptr<TokenSink> sink);
  void StepModel(LoadedModel* model);
  void EmitToken(Stream* st, int32_t token);
  // Ends `st` (restores sampling, reports, frees a throwaway session); `st` is erased later.
  void FinishStream(Stream* st, FinishReason reason, const absl::Status& status);
  void ReapFinished();
  void MaybeEvictIdle();
  // malloc_trim(0) on an idle wake-up after activity (at most once a second) and every
  // kBusyTrimInterval while busy (see the .cc).
  void MaybeReleaseFreeMemory(bool idle);
  void UpdateGauges();

  absl::StatusOr<Session*> FindSession(const std::string& id);
  absl::Status EnsureResident(Session* s);
  absl::Status CheckCapacity() const;
  Session* AddSession(LoadedModel* model, SessionState state, bool throwaway);
  void EraseSession(Session* s);
  SessionInfo Info(const Session& s) const;

  const std::vector<std::unique_ptr<LoadedModel>> models_;
  const std::string default_model_;
  const CheckpointStore store_;
  const ServerOptions options_;
  Metrics* const metrics_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;

  // Loop thread only.
  bool draining_ = false;
  absl::flat_hash_map<std::string, std::unique_ptr<Session>> sessions_;
  std::vector<std::unique_ptr<Stream>> streams_;  // arrival order
  absl::Time last_evict_scan_ = absl::InfinitePast();
  absl::Time last_trim_ = absl::InfinitePast();
  bool busy_since_trim_ = false;
  uint64_t tokens_generated_ = 0;
};

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_ENGINE_LOOP_H_
