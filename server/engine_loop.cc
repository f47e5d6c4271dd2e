// EngineLoop: thread, queue, stream admission, batched steps. Session operations are in
// engine_loop_sessions.cc.
#include "server/engine_loop.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/ids.h"

namespace flatstate::server {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength: return "LENGTH";
    case FinishReason::kStop: return "STOP";
    case FinishReason::kCancelled: return "CANCELLED";
  }
  return "?";
}

EngineLoop::EngineLoop(std::vector<std::unique_ptr<LoadedModel>> models,
                       std::string default_model, CheckpointStore store,
                       const ServerOptions& options, Metrics* metrics)
    : models_(std::move(models)),
      default_model_(std::move(default_model)),
      store_(std::move(store)),
      options_(options),
      metrics_(metrics) {}

EngineLoop::~EngineLoop() { Stop(); }

const LoadedModel* EngineLoop::FindModel(const std::string& name) const {
  for (const auto& m : models_) {
    if (m->name == name) return m.get();
  }
  return nullptr;
}

std::string EngineLoop::ModelNames() const {
  std::vector<std::string> names;
  for (const auto& m : models_) names.push_back(m->name);
  return absl::StrJoin(names, ", ");
}

void EngineLoop::Start() {
  thread_ = std::thread([this] { Run(); });
}

void EngineLoop::BeginShutdown() {
  Post([this] {
    draining_ = true;
    for (auto& st : streams_) {
      if (!st->done) {
        FinishStream(st.get(), FinishReason::kCancelled,
                     absl::UnavailableError("server is shutting down"));
      }
    }
  });
}

void EngineLoop::Stop() {
  if (!thread_.joinable()) return;
  BeginShutdown();
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.Signal();
  }
  thread_.join();
}

void EngineLoop::Post(std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(fn));
  cv_.Signal();
}

void EngineLoop::Run() {
  while (true) {
    std::deque<std::function<void()>> work;
    bool stopping = false;
    bool idle = false;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty() && streams_.empty() && !stop_) {
        // Idle: sleep until work arrives, waking now and then to evict idle sessions.
        cv_.WaitWithTimeout(&mu_, absl::Milliseconds(kIdleWakeMs));
        idle = queue_.empty();  // woke with nothing to do
      }
      work.swap(queue_);
      stopping = stop_;
    }
    if (!idle || !work.empty()) busy_since_trim_ = true;
    MaybeReleaseFreeMemory(idle && work.empty());
    for (auto& fn : work) fn();
    if (stopping && work.empty()) break;
    ReapFinished();
    for (const auto& m : models_) StepModel(m.get());
    ReapFinished();
    MaybeEvictIdle();
    UpdateGauges();
  }
}

void EngineLoop::MaybeReleaseFreeMemory(bool idle) {
  // glibc keeps freed memory mapped in the arena that freed it, and gRPC's many threads spread
  // a burst of calls over many arenas: after a flood the process holds the flood's peak heap
  // (measured: live allocations flat, RSS up; docs/reliability.md). malloc_trim(0) hands the
  // free pages of every arena back to the OS. On an idle wake-up after activity (at most once a
  // second), and every kBusyTrimInterval while busy, so a server that is never idle does not
  // creep either. Its duration is in flatstate_malloc_trim_seconds.
  if (!busy_since_trim_) return;
  const absl::Time now = absl::Now();
  if (now - last_trim_ < (idle ? absl::Seconds(1) : kBusyTrimInterval)) return;
  malloc_trim(0);
  last_trim_ = absl::Now();
  busy_since_trim_ = false;
  metrics_->malloc_trim_seconds.Observe(absl::ToDoubleSeconds(last_trim_ - now));
}

void EngineLoop::Generate(GenerateJob job, std::shared_ptr<TokenSink> sink) {
  // std::function needs a copyable closure: move the job into a shared_ptr.
  auto j = std::make_shared<GenerateJob>(std::move(job));
  Post([this, j, sink = std::move(sink)]() mutable { AdmitStream(std::move(*j), std::move(sink)); });
}

void EngineLoop::AdmitStream(GenerateJob job, std::shared_ptr<TokenSink> sink) {
  GenerateSummary fail;
  fail.session_id = job.session_id;
  fail.model = job.model;
  fail.prompt_tokens = job.prompt.size();
  auto reject = [&](const absl::Status& s) { sink->OnFinish(fail, s); };
  if (draining_) return reject(absl::UnavailableError("server is shutting down"));
  if (sink->Cancelled()) return reject(absl::CancelledError("cancelled before it started"));

  Session* session = nullptr;
  if (job.session_id.empty()) {
    LoadedModel* model =
        const_cast<LoadedModel*>(FindModel(job.model.empty() ? default_model_ : job.model));
    if (model == nullptr) {
      return reject(absl::InvalidArgumentError(absl::StrCat("model: unknown model '", job.model,
                                                            "' (loaded: ", ModelNames(), ")")));
    }
    if (absl::Status s = CheckCapacity(); !s.ok()) return reject(s);
    session = AddSession(model, model->engine->NewSession(job.sampling.value_or(SamplingParams{})),
                         /*throwaway=*/true);
  } else {
    absl::StatusOr<Session*> found = FindSession(job.session_id);
    if (!found.ok()) return reject(found.status());
    session = *found;
    fail.model = session->model->name;
    if (!job.model.empty() && job.model != session->model->name) {
      return reject(absl::InvalidArgumentError(
          absl::StrCat("model: '", job.model, "' does not match session ", session->id,
                       " which uses model '", session->model->name, "'")));
    }
    if (session->stream != nullptr) {
      return reject(absl::FailedPreconditionError(absl::StrCat(
          "session ", session->id, " is already generating (one Generate at a time)")));
    }
    if (absl::Status s = EnsureResident(session); !s.ok()) return reject(s);
  }
  Engine* engine = session->model->engine.get();
  auto fail_and_drop = [&](const absl::Status& s) {
    if (session->throwaway) EraseSession(session);
    reject(s);
  };
  if (job.prompt.empty() && session->state.pending.empty()) {
    return fail_and_drop(absl::InvalidArgumentError(
        absl::StrCat("prompt: empty input, and session ", session->id,
                     " has no context to continue from")));
  }
  const ModelConfig& cfg = session->model->config();
  if (!cfg.is_linear()) {
    const int64_t need = session->state.context_tokens() +
                         static_cast<int64_t>(job.prompt.size()) + job.max_new_tokens;
    if (need > cfg.max_position_embeddings) {
      return fail_and_drop(absl::InvalidArgumentError(absl::StrCat(
          "max_new_tokens: context ", session->state.context_tokens(), " + prompt ",
          job.prompt.size(), " + max_new_tokens ", job.max_new_tokens,
          " exceeds the model's max_position_embeddings ", cfg.max_position_embeddings)));
    }
  }
  if (absl::Status s = engine->Append(&session->state, job.prompt); !s.ok()) {
    return fail_and_drop(s);
  }
  auto st = std::make_unique<Stream>();
  st->session = session;
  st->sink = std::move(sink);
  st->max_new_tokens = job.max_new_tokens;
  st->prompt_tokens = job.prompt.size();
  st->stop = std::move(job.stop);
  st->arrival = job.arrival;
  st->last_token = job.arrival;
  if (job.sampling.has_value() && !session->throwaway) {
    st->override_sampling = true;
    st->saved_sampling = session->state.sampling;
    st->saved_rng = session->state.rng;
    session->state.sampling = *job.sampling;
    session->state.rng.Seed(job.sampling->seed);
  }
  metrics_->prompt_tokens += job.prompt.size();
  session->stream = st.get();
  session->last_used = absl::Now();
  streams_.push_back(std::move(st));
}

void EngineLoop::StepModel(LoadedModel* model) {
  Engine* engine = model->engine.get();
  std::vector<Stream*> decode, prefill;
  for (auto& st : streams_) {
    if (st->done || st->session->model != model) continue;
    if (st->sink->Cancelled()) {
      FinishStream(st.get(), FinishReason::kCancelled, absl::CancelledError("cancelled"));
      continue;
    }
    (st->session->state.pending.size() <= 1 ? decode : prefill).push_back(st.get());
  }
  if (decode.empty() && prefill.empty()) return;

  std::vector<StepRequest> reqs;
  std::vector<Stream*> owners;
  int64_t budget = options_.step_token_budget - static_cast<int64_t>(decode.size());
  for (Stream* st : decode) {
    reqs.push_back(StepRequest{&st->session->state, 1, true});
    owners.push_back(st);
  }
  bool any_prefill = false;
  for (Stream* st : prefill) {  // oldest first
    if (budget <= 0 && (any_prefill || !decode.empty())) break;
    const int64_t max_tokens = std::max<int64_t>(budget, 1);
    budget -= engine->PlanTokens(st->session->state, max_tokens);
    reqs.push_back(StepRequest{&st->session->state, max_tokens, true});
    owners.push_back(st);
    any_prefill = true;
  }
  // Softmax: make sure the pool can hold every run, failing only the streams that do not fit.
  if (KvBlockPool* pool = engine->kv_pool(); pool != nullptr) {
    int64_t free_blocks = pool->blocks_free();
    std::vector<StepRequest> kept_reqs;
    std::vector<Stream*> kept;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const SessionState& s = *reqs[i].session;
      const int64_t end = s.position + engine->PlanTokens(s, reqs[i].max_tokens);
      const int64_t need = (end + pool->block_size() - 1) / pool->block_size() -
                           static_cast<int64_t>(s.kv_blocks.size());
      if (need > free_blocks) {
        FinishStream(owners[i], FinishReason::kCancelled,
                     absl::ResourceExhaustedError(absl::StrCat(
                         "KV block pool of model '", model->name, "' is full: session ",
                         owners[i]->session->id, " needs ", need, " more blocks, ", free_blocks,
                         " free of ", pool->blocks_total())));
        continue;
      }
      free_blocks -= std::max<int64_t>(need, 0);
      kept_reqs.push_back(reqs[i]);
      kept.push_back(owners[i]);
    }
    reqs.swap(kept_reqs);
    owners.swap(kept);
    if (reqs.empty()) return;
  }

  std::vector<StepResult> results;
  const absl::Time t0 = absl::Now();
  absl::Status s = engine->Step(reqs, &results);
  const absl::Time t1 = absl::Now();
  metrics_->engine_steps++;
  metrics_->step_seconds.Observe(absl::ToDoubleSeconds(t1 - t0));
  metrics_->step_batch_size.Observe(static_cast<double>(reqs.size()));
  if (!s.ok()) {
    for (Stream* st : owners) FinishStream(st, FinishReason::kCancelled, s);
    return;
  }
  int64_t ran = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    ran += results[i].consumed;
    if (results[i].sampled) EmitToken(owners[i], results[i].token);
  }
  metrics_->step_tokens.Observe(static_cast<double>(ran));
}

void EngineLoop::EmitToken(Stream* st, int32_t token) {
  const absl::Time now = absl::Now();
  if (st->generated == 0) {
    metrics_->time_to_first_token.Observe(absl::ToDoubleSeconds(now - st->arrival));
  } else {
    metrics_->inter_token_latency.Observe(absl::ToDoubleSeconds(now - st->last_token));
  }
  st->last_token = now;
  ++st->generated;
  ++tokens_generated_;
  metrics_->tokens_generated++;
  std::string text = st->session->decoder.Push(token);
  const size_t old_len = st->text.size();
  bool stopped = false;
  if (!st->stop.empty() && !text.empty()) {
    st->text += text;
    for (const std::string& stop : st->stop) {
      const size_t from = old_len >= stop.size() ? old_len - stop.size() + 1 : 0;
      if (st->text.find(stop, from) != std::string::npos) stopped = true;
    }
  }
  st->sink->OnTokens({token}, std::move(text));
  if (stopped) {
    FinishStream(st, FinishReason::kStop, absl::OkStatus());
  } else if (st->generated >= st->max_new_tokens) {
    FinishStream(st, FinishReason::kLength, absl::OkStatus());
  }
}

void EngineLoop::FinishStream(Stream* st, FinishReason reason, const absl::Status& status) {
  if (st->done) return;
  st->done = true;
  Session* session = st->session;
  session->stream = nullptr;
  session->last_used = absl::Now();
  if (st->override_sampling) {
    session->state.sampling = st->saved_sampling;
    session->state.rng = st->saved_rng;
  }
  if (session->throwaway && status.ok()) {
    std::string tail = session->decoder.Flush();
    if (!tail.empty()) st->sink->OnTokens({}, std::move(tail));
  }
  GenerateSummary sum;
  sum.session_id = session->id;
  sum.model = session->model->name;
  sum.reason = reason;
  sum.prompt_tokens = st->prompt_tokens;
  sum.generated_tokens = st->generated;
  sum.context_tokens = static_cast<uint64_t>(session->state.context_tokens());
  sum.state_bytes = session->model->engine->SessionBytes(session->state);
  if (options_.log_requests) {
    const std::string outcome = status.ok() ? FinishReasonName(reason)
                                            : absl::StatusCodeToString(status.code());
    std::fprintf(stderr, "%s\n",
                 absl::StrFormat("[flatstate] Generate session=%s%s model=%s in=%d out=%d "
                                 "context=%d time_ms=%.1f finish=%s%s",
                                 session->id, session->throwaway ? "(throwaway)" : "",
                                 sum.model, sum.prompt_tokens, sum.generated_tokens,
                                 sum.context_tokens,
                                 absl::ToDoubleMilliseconds(absl::Now() - st->arrival), outcome,
                                 status.ok() || status.code() == absl::StatusCode::kCancelled
                                     ? ""
                                     : absl::StrCat(" error=\"", status.message(), "\""))
                     .c_str());
  }
  st->sink->OnFinish(sum, status);
  if (session->throwaway) EraseSession(session);
  st->session = nullptr;
}

void EngineLoop::ReapFinished() {
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const std::unique_ptr<Stream>& s) { return s->done; }),
                 streams_.end());
}

}  // namespace flatstate::server
