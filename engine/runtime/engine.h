// Engine: one loaded model with its KV block pool, thread pool and forward pass; creates,
// advances, checkpoints and restores sessions. The unit the server's engine loop drives.
//
// Owns the Model, the KvBlockPool (softmax), the ThreadPool and the ForwardPass. Sessions are
// SessionState values owned by the caller; the engine only touches the sessions passed to a call.
// Not thread-safe: one thread (the engine loop, or a CLI/test) calls it.
//
// Generation protocol. A session's context is `position` tokens already run plus `pending` tokens
// not yet run. Append() adds prompt tokens to `pending`. Step() runs, for each request, up to
// max_tokens pending tokens (prefill splits fall on absolute multiples of the chunk size, so the
// floats never depend on the token budget); when a request's pending tokens are all consumed and
// it asked to sample, the next token is drawn with the session's sampler and RNG and becomes the
// new pending token. So a checkpoint taken between steps continues exactly.
#ifndef FLATSTATE_ENGINE_RUNTIME_ENGINE_H_
#define FLATSTATE_ENGINE_RUNTIME_ENGINE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_block_pool.h"
#include "engine/model/model.h"
#include "engine/runtime/forward.h"
#include "engine/session/checkpoint.h"
#include "engine/session/session_state.h"
#include "engine/util/thread_pool.h"
#include "kernels/device.h"

namespace flatstate {

struct EngineOptions {
  Device device = Device::kCpu;
  int threads = 0;            // 0: all hardware threads
  int kv_blocks = 4096;       // softmax only: blocks in the pool
  int kv_block_size = 16;     // tokens per block
  int chunk_size = 0;         // 0: the model's config value
};

struct StepRequest {
  SessionState* session = nullptr;
  int64_t max_tokens = 1 << 30;  // pending tokens this step may run
  bool sample = true;            // draw the next token once pending is empty
};

struct StepResult {
  int64_t consumed = 0;  // pending tokens run this step
  bool sampled = false;
  int32_t token = -1;    // the sampled token (now the session's only pending token)
};

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                        const EngineOptions& options);
  ~Engine();

  const Model& model() const { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  Device device() const { return options_.device; }
  int chunk_size() const { return forward_->chunk_size(); }
  KvBlockPool* kv_pool() { return kv_.get(); }  // null for linear kinds

  // Bytes of per-session state: the recurrent state (linear) or KV bytes in use (softmax).
  size_t SessionBytes(const SessionState& s) const;

  SessionState NewSession(const SamplingParams& sampling) const;
  // Returns the session's KV blocks to the pool. The state must not be used afterwards.
  void ReleaseSession(SessionState* s);

  // Validates token ids and appends them to the session's pending input.
  absl::Status Append(SessionState* s, std::span<const int32_t> tokens) const;

  // How many pending tokens of `s` a step with budget `budget` would run: all of them if they
  // fit, else the largest prefix that ends on a multiple of the chunk size (up to the next
  // multiple when the budget is smaller than that distance).
  int64_t PlanTokens(const SessionState& s, int64_t budget) const;

  // Runs one batched step (see the protocol above). Softmax KV blocks are reserved first: a
  // session whose blocks cannot be reserved fails the whole step with ResourceExhausted naming it
  // (index in `requests`), with no session changed. `results` gets one entry per request.
  absl::Status Step(std::span<const StepRequest> requests, std::vector<StepResult>* results);

  // Runs `tokens` for one session and returns the logits of every one (tests and tools).
  absl::StatusOr<std::vector<float>> Score(SessionState* s, std::span<const int32_t> tokens);

  absl::StatusOr<std::string> Checkpoint(const SessionState& s) const;
  absl::StatusOr<SessionState> Restore(std::string_view blob);

 private:
  Engine() = default;
  std::unique_ptr<Model> model_;
  EngineOptions options_;
  std::unique_ptr<ThreadPool> threads_;
  std::unique_ptr<Parallel> parallel_;
  std::unique_ptr<KvBlockPool> kv_;
  std::unique_ptr<ForwardPass> forward_;
  CheckpointModel ckpt_model_;
  std::vector<float> logits_;
  std::vector<std::pair<float, int32_t>> scratch_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_RUNTIME_ENGINE_H_
