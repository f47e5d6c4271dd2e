#include "engine/runtime/engine.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"
#include "kernels/gemm.h"

namespace flatstate {
namespace {

class PoolParallel final : public Parallel {
 public:
  explicit PoolParallel(ThreadPool* pool) : pool_(pool) {}
  int num_threads() const override { return pool_->num_threads(); }
  void For(int64_t n, const std::function<void(int64_t, int64_t)>& fn) const override {
    pool_->ParallelFor(n, fn);
  }

 private:
  ThreadPool* pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                                       const EngineOptions& options) {
  RETURN_IF_ERROR(CheckDevice(options.device));
  if (options.kv_blocks <= 0 || options.kv_block_size <= 0) {
    return absl::InvalidArgumentError("kv_blocks and kv_block_size must be > 0");
  }
  auto e = std::unique_ptr<Engine>(new Engine());
  e->model_ = std::move(model);
  e->options_ = options;
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  e->threads_ = std::make_unique<ThreadPool>(threads);
  e->parallel_ = std::make_unique<PoolParallel>(e->threads_.get());
  const ModelConfig& c = e->model_->config();
  if (!c.is_linear()) {
    e->kv_ = std::make_unique<KvBlockPool>(options.kv_blocks, options.kv_block_size,
                                           c.num_hidden_layers, c.hidden_size);
  }
  ASSIGN_OR_RETURN(e->forward_, ForwardPass::Create(e->model_.get(), options.device, e->kv_.get(),
                                                    e->parallel_.get(), options.chunk_size));
  e->ckpt_model_ = CheckpointModel{e->model_->fingerprint(), c};
  return e;
}

Engine::~Engine() = default;

size_t Engine::SessionBytes(const SessionState& s) const {
  if (config().is_linear()) return s.linear.size() * sizeof(float);
  return s.kv_blocks.size() * kv_->bytes_per_block();
}

SessionState Engine::NewSession(const SamplingParams& sampling) const {
  return NewSessionState(config(), sampling);
}

void Engine::ReleaseSession(SessionState* s) {
  if (kv_ != nullptr) kv_->Release(&s->kv_blocks);
}

absl::Status Engine::Append(SessionState* s, std::span<const int32_t> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_tokens[", i, "] = ", tokens[i],
                                                     " is out of range [0, ",
                                                     config().vocab_size, ")"));
    }
  }
  s->pending.insert(s->pending.end(), tokens.begin(), tokens.end());
  return absl::OkStatus();
}

int64_t Engine::PlanTokens(const SessionState& s, int64_t budget) const {
  const int64_t pending = static_cast<int64_t>(s.pending.size());
  if (pending <= budget) return pending;
  const int64_t C = chunk_size();
  // Largest end position <= position + budget on the chunk grid; when the budget does not reach
  // the next grid point, run up to it anyway (at most C tokens) so splits stay on the grid.
  int64_t end = ((s.position + budget) / C) * C;
  if (end <= s.position) end = (s.position / C + 1) * C;
  return std::min(pending, end - s.position);
}

absl::Status Engine::Step(std::span<const StepRequest> requests,
                          std::vector<StepResult>* results) {
  results->assign(requests.size(), StepResult{});
  std::vector<SequenceRun> runs;
  std::vector<size_t> run_of;  // request index per run
  std::vector<std::vector<int32_t>> run_tokens(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    SessionState* s = requests[i].session;
    const int64_t n = PlanTokens(*s, std::max<int64_t>(requests[i].max_tokens, 1));
    if (n == 0) continue;
    run_tokens[i].assign(s->pending.begin(), s->pending.begin() + n);
  }
  // Reserve KV blocks for every softmax run first (all-or-nothing per step).
  if (kv_ != nullptr) {
    std::vector<std::pair<SessionState*, size_t>> grown;  // session, old table size
    for (size_t i = 0; i < requests.size(); ++i) {
      if (run_tokens[i].empty()) continue;
      SessionState* s = requests[i].session;
      const size_t before = s->kv_blocks.size();
      absl::Status st = kv_->Reserve(&s->kv_blocks,
                                     s->position + static_cast<int64_t>(run_tokens[i].size()));
      if (!st.ok()) {
        // Roll back what this step reserved so no session changes.
        for (auto& [gs, old] : grown) {
          std::vector<int32_t> extra(gs->kv_blocks.begin() + old, gs->kv_blocks.end());
          gs->kv_blocks.resize(old);
          kv_->Release(&extra);
        }
        return absl::ResourceExhaustedError(
            absl::StrCat("request ", i, ": ", st.message()));
      }
      grown.emplace_back(s, before);
    }
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    if (run_tokens[i].empty()) continue;
    runs.push_back(SequenceRun{requests[i].session, run_tokens[i], false});
    run_of.push_back(i);
  }
  if (runs.empty()) return absl::OkStatus();
  RETURN_IF_ERROR(forward_->Run(runs, &logits_));
  const int V = config().vocab_size;
  for (size_t r = 0; r < runs.size(); ++r) {
    const size_t i = run_of[r];
    SessionState* s = requests[i].session;
    StepResult& res = (*results)[i];
    res.consumed = static_cast<int64_t>(run_tokens[i].size());
    s->pending.erase(s->pending.begin(), s->pending.begin() + res.consumed);
    if (s->pending.empty() && requests[i].sample) {
      res.token = SampleToken(logits_.data() + r * V, V, s->sampling, &s->rng, &scratch_);
      res.sampled = true;
      s->pending.push_back(res.token);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Engine::Score(SessionState* s,
                                                 std::span<const int32_t> tokens) {
  if (kv_ != nullptr) {
    RETURN_IF_ERROR(kv_->Reserve(&s->kv_blocks,
                                 s->position + static_cast<int64_t>(tokens.size())));
  }
  std::vector<float> out;
  SequenceRun run{s, tokens, true};
  RETURN_IF_ERROR(forward_->Run(std::span<const SequenceRun>(&run, 1), &out));
  return out;
}

absl::StatusOr<std::string> Engine::Checkpoint(const SessionState& s) const {
  RETURN_IF_ERROR(forward_->SyncKvToHost(s.kv_blocks));  // CUDA softmax: KV lives on the GPU
  return SerializeSession(ckpt_model_, s, kv_.get());
}

absl::StatusOr<SessionState> Engine::Restore(std::string_view blob) {
  SessionState s;
  RETURN_IF_ERROR(RestoreSession(ckpt_model_, blob, kv_.get(), &s));
  absl::Status st = forward_->SyncKvToDevice(s.kv_blocks);
  if (!st.ok()) {
    ReleaseSession(&s);
    return st;
  }
  return s;
}

}  // namespace flatstate
