#include "engine/runtime/engine.h"

#include <algorithm>
#include <numeric>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/runtime/step_plan.h"
#include "engine/util/status_macros.h"
#include "kernels/gemm.h"

namespace flatstate {

absl::StatusOr<std::optional<WeightDtype>> ParseWeightDtypeOption(absl::string_view name,
                                                                  absl::string_view field) {
  if (name.empty() || absl::AsciiStrToLower(name) == "auto") return std::nullopt;
  absl::StatusOr<WeightDtype> d = ParseWeightDtype(name);
  if (!d.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": unknown type '", name,
        "' (expected auto, the model file's own type, or f32, bf16, int8, int4 or bf16dot)"));
  }
  return *d;
}

WeightDtype StoredWeightDtype(TorchDtype torch_dtype) {
  switch (torch_dtype) {
    case TorchDtype::kBfloat16:
      return WeightDtype::kBf16;
    case TorchDtype::kInt8:
      return WeightDtype::kInt8;
    case TorchDtype::kInt4:
      return WeightDtype::kInt4;
    case TorchDtype::kFloat32:
      break;
  }
  return WeightDtype::kF32;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model,
                                                       const EngineOptions& options) {
  RETURN_IF_ERROR(CheckDevice(options.device));
  if (options.kv_blocks <= 0 || options.kv_block_size <= 0) {
    return absl::InvalidArgumentError("kv_blocks and kv_block_size must be > 0");
  }
  auto e = std::unique_ptr<Engine>(new Engine());
  e->model_ = std::move(model);
  e->options_ = options;
  ThreadPool* pool = options.thread_pool;
  if (pool == nullptr) {
    const int threads = options.threads > 0
                            ? options.threads
                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    e->owned_pool_ = std::make_unique<ThreadPool>(threads);
    pool = e->owned_pool_.get();
  }
  e->pool_ = pool;
  e->parallel_ = std::make_unique<PoolParallel>(pool);
  const ModelConfig& c = e->model_->config();
  if (c.has_kv()) {
    e->kv_ = std::make_unique<KvBlockPool>(options.kv_blocks, options.kv_block_size, c.kv_layers(),
                                           c.kv_dim(), options.kv_dtype);
  }
  e->weight_dtype_ = options.weight_dtype.value_or(StoredWeightDtype(c.torch_dtype));
  if ((c.torch_dtype == TorchDtype::kInt8 || c.torch_dtype == TorchDtype::kInt4) &&
      (e->weight_dtype_ == WeightDtype::kInt8 || e->weight_dtype_ == WeightDtype::kInt4) &&
      e->weight_dtype_ != StoredWeightDtype(c.torch_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        e->model_->dir(), "/config.json: torch_dtype \"", TorchDtypeName(c.torch_dtype),
        "\": the layer weights are stored quantised as ", TorchDtypeName(c.torch_dtype),
        " and cannot run as weight_dtype ", WeightDtypeName(e->weight_dtype_),
        " (quantised weights are not quantised again); use auto, ", TorchDtypeName(c.torch_dtype),
        ", f32 or bf16"));
  }
  ASSIGN_OR_RETURN(e->forward_, ForwardPass::Create(e->model_.get(), options.device, e->kv_.get(),
                                                    e->parallel_.get(), options.chunk_size,
                                                    {e->weight_dtype_, options.batch_invariant},
                                                    options.head_dtype));
  std::string fingerprint = e->model_->fingerprint();
  if (e->weight_dtype_ != WeightDtype::kF32) {
    absl::StrAppend(&fingerprint, "-", WeightDtypeName(e->weight_dtype_));
  }
  if (options.head_dtype.has_value()) {
    absl::StrAppend(&fingerprint, "-head-", WeightDtypeName(*options.head_dtype));
  }
  if (!c.is_linear() && options.kv_dtype != KvDtype::kF32) {
    absl::StrAppend(&fingerprint, "-kv-", KvDtypeName(options.kv_dtype));
  }
  e->ckpt_model_ = CheckpointModel{std::move(fingerprint), c};
  e->prefix_grid_ = e->forward_->chunk_size();
  if (e->kv_ != nullptr) e->prefix_grid_ = std::lcm(e->prefix_grid_, options.kv_block_size);
  if (options.prefix_cache_bytes > 0) {
    e->cache_ = std::make_unique<PrefixCache>(options.prefix_cache_bytes, e->kv_.get());
  }
  // Grammars kept per model: each holds a TokenMasker whose caches reach tens of MB on a large
  // vocabulary (docs/grammar.md), so a few, for the schemas clients repeat.
  constexpr size_t kGrammarCacheEntries = 16;
  const Model* m = e->model_.get();
  e->grammars_ = std::make_unique<GrammarCache>([m] { return BuildGrammarVocabulary(*m); },
                                                kGrammarCacheEntries);
  return e;
}

Engine::~Engine() = default;

size_t Engine::SessionBytes(const SessionState& s) const {
  return s.linear.size() * sizeof(float) +
         (kv_ != nullptr ? s.kv_blocks.size() * kv_->bytes_per_block() : 0);
}

int64_t Engine::KvBlocksAvailable() const {
  if (kv_ == nullptr) return 0;
  return kv_->blocks_free() + (cache_ != nullptr ? kv_->blocks_cache_only() : 0);
}

PrefixCacheStats Engine::prefix_cache_stats() const {
  return cache_ != nullptr ? cache_->stats() : PrefixCacheStats{};
}

SessionState Engine::NewSession(const SamplingParams& sampling) const {
  return NewSessionState(config(), sampling);
}

void Engine::ReleaseSession(SessionState* s) {
  if (kv_ != nullptr) kv_->Release(&s->kv_blocks);
  forward_->ReleaseState(s);
}

size_t Engine::DeviceStateBytes() const { return forward_->state_pool_bytes(); }

absl::StatusOr<DeviceMemoryInfo> Engine::DeviceMemory() const { return forward_->device_memory(); }

absl::Status Engine::SyncToHost(SessionState* s) {
  if (kv_ != nullptr) RETURN_IF_ERROR(forward_->SyncKvToHost(s->kv_blocks));
  if (!s->device.host_stale || s->device.id < 0) return absl::OkStatus();
  RETURN_IF_ERROR(forward_->ReadState(*s, s->linear.data()));
  s->device.host_stale = false;
  return absl::OkStatus();
}

absl::StatusOr<const SessionState*> Engine::HostView(const SessionState& s) {
  // CUDA softmax layers: K/V live on the GPU.
  if (kv_ != nullptr) RETURN_IF_ERROR(forward_->SyncKvToHost(s.kv_blocks));
  if (!s.device.host_stale) return &s;
  if (s.device.id < 0) {
    return absl::FailedPreconditionError(
        "session state is a copy made while its newest linear state was on the device "
        "(call Engine::SyncToHost before copying a session)");
  }
  host_view_ = s;  // a copy: its `linear` is refreshed from the slot below
  RETURN_IF_ERROR(forward_->ReadState(s, host_view_.linear.data()));
  host_view_.device.host_stale = false;
  return &host_view_;
}

absl::Status Engine::ValidateTokens(std::span<const int32_t> tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config().vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token ", tokens[i], " at index ", i, " is out of range [0, ", config().vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Append(SessionState* s, std::span<const int32_t> tokens) const {
  RETURN_IF_ERROR(ValidateTokens(tokens));
  s->pending.insert(s->pending.end(), tokens.begin(), tokens.end());
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Engine::AppendPrompt(SessionState* s, std::span<const int32_t> prompt) {
  const bool fresh = s->position == 0 && s->pending.empty() && s->kv_blocks.empty();
  const int64_t n = static_cast<int64_t>(prompt.size());
  const int64_t grid = prefix_grid_;
  const int64_t last = LastGridPoint(n, grid);
  if (cache_ == nullptr || !fresh || last == 0) {
    RETURN_IF_ERROR(Append(s, prompt));
    return 0;
  }
  RETURN_IF_ERROR(ValidateTokens(prompt));
  const std::vector<PrefixKey> keys = PrefixKeys(prompt, grid, last);
  int64_t hit = 0;
  for (int64_t g = LastGridPoint(n - 1, grid); g >= grid && hit == 0; g -= grid) {
    const PrefixCache::Entry* e = cache_->Find(keys[static_cast<size_t>(g / grid - 1)]);
    if (e == nullptr) continue;
    if (kv_ != nullptr) kv_->Share(e->blocks, &s->kv_blocks);
    if (!e->state.empty()) s->linear = e->state;
    s->position = g;
    hit = g;
  }
  cache_->CountLookup(hit > 0, hit);
  s->pending.assign(prompt.begin() + hit, prompt.end());
  s->prefix_marks.clear();
  for (int64_t g = hit + grid; g <= last; g += grid) {
    // State (linear kinds, and models with both): the last grid point only.
    if (config().has_state() && g != last) continue;
    s->prefix_marks.emplace_back(g, keys[static_cast<size_t>(g / grid - 1)]);
  }
  return hit;
}

void Engine::MaybeSnapshot(SessionState* s) {
  if (s->prefix_marks.empty() || s->position != s->prefix_marks.back().first) return;
  if (cache_ != nullptr) {
    if (!config().has_state()) {
      for (const auto& [tokens, key] : s->prefix_marks) {
        const size_t blocks = static_cast<size_t>(tokens / kv_->block_size());
        cache_->InsertBlocks(key, tokens, std::span<const int32_t>(s->kv_blocks).first(blocks));
      }
    } else if (SyncToHost(s).ok()) {  // CUDA: the state is in the session's device slot
      // The state, and with softmax layers the blocks of the same prefix.
      const size_t blocks =
          kv_ != nullptr ? static_cast<size_t>(s->position / kv_->block_size()) : 0;
      cache_->InsertState(s->prefix_marks.back().second, s->position, s->linear,
                          std::span<const int32_t>(s->kv_blocks).first(blocks));
    }
  }
  s->prefix_marks.clear();
}

int64_t Engine::PlanTokens(const SessionState& s, int64_t budget) const {
  return ChunkGridTokens(s.position, static_cast<int64_t>(s.pending.size()), budget, chunk_size());
}

absl::Status Engine::Admit(SessionState* s, int64_t tokens) {
  const int64_t end = s->position + tokens;
  RETURN_IF_ERROR(forward_->AcquireState(s));  // state: its device slot, if any
  if (kv_ == nullptr) return absl::OkStatus();
  // The whole context, not only this run: a prompt that cannot fit is refused at its first piece.
  const int64_t context = s->context_tokens();
  if (context > config().max_position_embeddings) {
    return absl::OutOfRangeError(absl::StrCat("context of ", context,
                                              " tokens would exceed max_position_embeddings ",
                                              config().max_position_embeddings));
  }
  absl::Status st = kv_->Reserve(&s->kv_blocks, end);
  // Blocks only the prefix cache holds are free on demand: drop its oldest entries until it fits.
  while (!st.ok() && cache_ != nullptr && kv_->blocks_cache_only() > 0 && cache_->EvictOldest()) {
    st = kv_->Reserve(&s->kv_blocks, end);
  }
  if (!st.ok()) return absl::ResourceExhaustedError(st.message());
  return absl::OkStatus();
}

absl::Status Engine::Step(std::span<const StepRequest> requests, std::vector<StepResult>* results) {
  results->assign(requests.size(), StepResult{});
  runs_.clear();
  run_of_.clear();
  reserved_.clear();
  step_sessions_.clear();
  spec_.clear();
  spec_of_run_.clear();
  size_t spec_floats = 0;  // the records the speculative runs need (spec_steps_)
  for (size_t i = 0; i < requests.size(); ++i) {
    SessionState* s = requests[i].session;
    if (s == nullptr) {
      (*results)[i].status = absl::InvalidArgumentError("no session");
      continue;
    }
    if (!step_sessions_.insert(s).second) {
      (*results)[i].status =
          absl::InvalidArgumentError("the session is already in an earlier request of this step");
      continue;
    }
    const int64_t n = PlanTokens(*s, requests[i].max_tokens);
    if (n == 0) continue;
    const size_t table_before = s->kv_blocks.size();
    std::span<const int32_t> draft = UsableDraft(requests[i], *s, n);
    absl::Status st = Admit(s, n + static_cast<int64_t>(draft.size()));
    if (!st.ok() && !draft.empty()) {  // no room for the draft: a plain step
      draft = {};
      st = Admit(s, n);
    }
    if (!st.ok()) {
      (*results)[i].status = std::move(st);
      continue;
    }
    if (s->kv_blocks.size() != table_before) reserved_.emplace_back(s, table_before);
    run_of_.push_back(i);
    if (draft.empty()) {
      runs_.push_back(SequenceRun{s, std::span<const int32_t>(s->pending.data(), n), false});
      spec_of_run_.push_back(-1);
      continue;
    }
    Speculation& sp = spec_.emplace_back();
    sp.run = runs_.size();
    sp.tokens.assign(s->pending.begin(), s->pending.end());
    sp.tokens.insert(sp.tokens.end(), draft.begin(), draft.end());
    sp.steps_offset = spec_floats;
    if (config().has_state()) spec_floats += draft.size() * config().state_floats();
    sp.position = s->position;
    sp.table_before = table_before;
    (*results)[i].drafted = static_cast<int>(draft.size());
    spec_of_run_.push_back(static_cast<int>(spec_.size()) - 1);
    // spec_'s token buffers do not move; the records' pointers are set below
    runs_.push_back(SequenceRun{s, sp.tokens, true, true, nullptr});
  }
  // The records of every speculative run, in one buffer kept from step to step (it only grows):
  // no allocation, and no page faults, per step.
  if (spec_floats > spec_steps_.size()) spec_steps_.resize(spec_floats);
  if (config().has_state()) {
    for (const Speculation& sp : spec_) runs_[sp.run].steps = spec_steps_.data() + sp.steps_offset;
  }
  first_row_.assign(runs_.size() + 1, 0);
  for (size_t r = 0; r < runs_.size(); ++r) {
    first_row_[r + 1] =
        first_row_[r] + (runs_[r].all_logits ? static_cast<int64_t>(runs_[r].tokens.size()) : 1);
  }
  if (!runs_.empty()) {
    if (absl::Status st = forward_->Run(runs_, &logits_); !st.ok()) {
      // Roll back: every table this step grew goes back to its old size.
      for (auto& [s, old_size] : reserved_) kv_->Truncate(&s->kv_blocks, old_size);
      for (size_t i : run_of_) (*results)[i].status = st;
      runs_.clear();
      spec_.clear();
    }
  }
  sampled_runs_.clear();
  for (size_t r = 0; r < runs_.size(); ++r) {
    const size_t i = run_of_[r];
    SessionState* s = requests[i].session;
    StepResult& res = (*results)[i];
    // A speculative run consumed the pending token (SettleSpeculation counts what it keeps).
    res.consumed = spec_of_run_[r] >= 0 ? 1 : static_cast<int64_t>(runs_[r].tokens.size());
    s->pending.erase(s->pending.begin(), s->pending.begin() + res.consumed);
    MaybeSnapshot(s);
    if (s->pending.empty() && requests[i].sample) {
      sampled_runs_.push_back(r);
      ForkChoices(requests[i], &res);
    }
  }
  // Each draw reads its own logits row and advances its own session's rng, so spreading the
  // draws over the pool changes no bit.
  const int V = config().vocab_size;
  pool_->ParallelFor(static_cast<int64_t>(sampled_runs_.size()), [&](int64_t b, int64_t e) {
    thread_local SamplerScratch scratch;
    for (int64_t j = b; j < e; ++j) {
      const size_t r = sampled_runs_[static_cast<size_t>(j)];
      const size_t i = run_of_[r];
      const float* rows = logits_.data() + first_row_[r] * V;
      if (spec_of_run_[r] >= 0) {
        DrawVerified(requests[i], std::span<const int32_t>(runs_[r].tokens).subspan(1), rows,
                     &(*results)[i], &scratch);
      } else {
        Draw(requests[i], rows, &(*results)[i], &scratch);
      }
    }
  });
  SettleSpeculation(requests, results);
  for (size_t r : sampled_runs_) {
    const size_t i = run_of_[r];
    if (!(*results)[i].sampled) continue;  // its grammar allowed nothing
    requests[i].session->pending.push_back((*results)[i].token);
    const std::vector<ChoiceDraw>& draws = (*results)[i].choices;
    for (size_t k = 0; k < draws.size(); ++k) {
      if (draws[k].status.ok()) requests[i].choices[k]->pending.push_back(draws[k].token);
    }
  }
  runs_.clear();
  spec_.clear();
  for (size_t i = 0; i < results->size(); ++i) {
    const absl::Status& st = (*results)[i].status;
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("request ", i, ": ", st.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Engine::Score(SessionState* s, std::span<const int32_t> tokens) {
  if (kv_ != nullptr) {
    RETURN_IF_ERROR(kv_->Reserve(&s->kv_blocks, s->position + static_cast<int64_t>(tokens.size())));
  }
  std::vector<float> out;
  SequenceRun run{s, tokens, true};
  RETURN_IF_ERROR(forward_->Run(std::span<const SequenceRun>(&run, 1), &out));
  return out;
}

absl::StatusOr<std::string> Engine::Checkpoint(const SessionState& s) {
  ASSIGN_OR_RETURN(const SessionState* host, HostView(s));
  return SerializeSession(ckpt_model_, *host, kv_.get());
}

absl::StatusOr<CheckpointSplit> Engine::CheckpointSplitFrom(const SessionState& s,
                                                            int64_t first_token) {
  const int64_t chunk_tokens = KvChunkTokens(config());
  if (kv_ != nullptr && first_token >= 0) {
    // CUDA softmax: only the blocks of the chunks written are copied to the host pool.
    const int64_t first_block =
        std::min<int64_t>(first_token / chunk_tokens * chunk_tokens / kv_->block_size(),
                          static_cast<int64_t>(s.kv_blocks.size()));
    RETURN_IF_ERROR(forward_->SyncKvToHost(
        std::span<const int32_t>(s.kv_blocks).subspan(static_cast<size_t>(first_block))));
    return SerializeSessionSplit(ckpt_model_, s, kv_.get(), chunk_tokens, first_token);
  }
  ASSIGN_OR_RETURN(const SessionState* host, HostView(s));
  return SerializeSessionSplit(ckpt_model_, *host, kv_.get(), chunk_tokens, first_token);
}

absl::StatusOr<SessionState> Engine::Restore(std::string_view blob) {
  SessionState s;
  const GrammarResolver grammars = [this](std::string_view gbnf) { return CompileGrammar(gbnf); };
  RETURN_IF_ERROR(RestoreSession(ckpt_model_, blob, kv_.get(), &s, &grammars));
  absl::Status st = forward_->SyncKvToDevice(s.kv_blocks);
  if (!st.ok()) {
    ReleaseSession(&s);
    return st;
  }
  return s;
}

}  // namespace flatstate
