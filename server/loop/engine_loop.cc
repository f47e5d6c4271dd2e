// EngineLoop: thread, queue, stream admission, scheduled steps, token emission. The unary
// session operations are in engine_loop_sessions.cc.
#include "server/loop/engine_loop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/loop/request_log.h"
#include "server/loop/scheduler.h"

namespace flatstate::server {

EngineLoop::EngineLoop(ModelRegistry models, std::unique_ptr<SessionStore> store,
                       const ServerOptions& options, Metrics* metrics)
    : models_(std::move(models)),
      store_(std::move(store)),
      options_(options),
      metrics_(metrics),
      sessions_(
          store_.get(), &models_,
          SessionTableOptions{options.max_sessions, options.session_idle_ttl, options.log_requests},
          metrics),
      trimmer_(&metrics->malloc_trim_seconds) {
  if (store_->shared())
    keeper_ = std::make_unique<LeaseKeeper>(store_.get(), options.session_lease);
}

EngineLoop::~EngineLoop() { Stop(); }

void EngineLoop::Start() {
  thread_ = std::thread([this] { Run(); });
}

void EngineLoop::BeginShutdown() {
  Post([this] {
    draining_ = true;
    for (auto& st : streams_) {
      FinishStream(st.get(), FinishReason::kShutdown,
                   absl::UnavailableError("server is shutting down"));
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
    if (!idle || !work.empty()) trimmer_.NoteActivity();
    trimmer_.Maybe(idle && work.empty());
    for (auto& fn : work) fn();
    if (stopping && work.empty()) break;
    ReapFinished();
    for (const auto& m : models_.models()) StepModel(m.get());
    EndStreamsThatLostTheirLease();
    ReapFinished();
    sessions_.MaybeEvictIdle(absl::Now());
    PublishGauges();
  }
}

void EngineLoop::Generate(GenerateJob job, std::shared_ptr<TokenSink> sink) {
  // std::function needs a copyable closure: move the job into a shared_ptr.
  auto j = std::make_shared<GenerateJob>(std::move(job));
  Post(
      [this, j, sink = std::move(sink)]() mutable { AdmitStream(std::move(*j), std::move(sink)); });
}

void EngineLoop::AdmitStream(GenerateJob job, std::shared_ptr<TokenSink> sink,
                             std::vector<std::shared_ptr<TokenSink>> more) {
  GenerateSummary fail;
  fail.session_id = job.session_id;
  fail.model = job.model;
  fail.prompt_tokens = job.prompt.size();
  fail.reason = FinishReason::kRejected;
  auto reject = [&](const absl::Status& s) {
    sink->OnFinish(fail, s);
    for (const auto& m : more) m->OnFinish(fail, s);
  };
  if (draining_) {
    fail.reason = FinishReason::kShutdown;
    return reject(absl::UnavailableError("server is shutting down"));
  }
  if (sink->Cancelled()) {
    fail.reason = FinishReason::kCancelled;
    return reject(absl::CancelledError("cancelled before it started"));
  }
  if (!more.empty() && !job.session_id.empty()) {
    return reject(absl::InvalidArgumentError(
        "n: several choices need a stateless request (no session_id); fork the session "
        "(ForkSession) to branch a conversation"));
  }

  Session* session = nullptr;
  TurnLease lease(store_.get());
  if (job.session_id.empty()) {
    absl::StatusOr<LoadedModel*> model = models_.Resolve(job.model);
    if (!model.ok()) return reject(model.status());
    absl::StatusOr<Session*> created =
        job.initial_state.has_value()
            ? StartFromState(*model, *job.initial_state, job.sampling)
            : sessions_.Create(*model, job.sampling.value_or(SamplingParams{}), /*throwaway=*/true);
    if (!created.ok()) return reject(created.status());
    session = *created;
  } else {
    absl::StatusOr<Session*> found =
        FindForTurn(job.session_id, &lease, "is already generating (one Generate at a time)");
    if (!found.ok()) return reject(found.status());
    session = *found;
    fail.model = session->model->name;
    if (!job.model.empty() && job.model != session->model->name) {
      lease.Release();
      return reject(absl::InvalidArgumentError(
          absl::StrCat("model: '", job.model, "' does not match session ", session->id,
                       " which uses model '", session->model->name, "'")));
    }
  }
  uint64_t cached_tokens = 0;
  absl::Status prepared = absl::OkStatus();
  if (job.prompt_text.has_value()) {  // a session's turn: its model's tokenizer encodes the text
    prepared = EncodePrompt(session->model->tokenizer(), *job.prompt_text, &job.prompt);
    job.prompt_text.reset();
  }
  if (prepared.ok()) prepared = PrepareSession(job, session, &cached_tokens);
  if (absl::Status s = prepared; !s.ok()) {
    if (session->throwaway) sessions_.Erase(session);
    lease.Release();
    return reject(s);
  }
  session->lease = lease.Take();
  if (keeper_ != nullptr && session->lease.has_value()) keeper_->Track(*session->lease);
  auto st = std::make_unique<Stream>();
  st->session = session;
  st->sink = std::move(sink);
  st->max_new_tokens = job.max_new_tokens;
  st->prompt_tokens = job.prompt.size();
  st->cached_prompt_tokens = cached_tokens;
  st->logprobs = job.logprobs;
  if (!job.ignore_eos) st->eos = session->model->config().eos_token_ids;
  st->eos.insert(st->eos.end(), job.stop_token_ids.begin(), job.stop_token_ids.end());
  if (!more.empty()) {
    st->choices = PendingChoices{std::move(more), job.stop,
                                 job.sampling.value_or(SamplingParams{}).seed};
  }
  if (job.max_draft_tokens > 0) {
    st->max_draft = job.max_draft_tokens;
    st->drafter = MakeDrafter(*session->model, job.max_draft_tokens);
    st->drafter->Append(job.prompt);
  }
  st->text = StreamText(std::move(job.stop));
  st->arrival = job.arrival;
  st->last_token = job.arrival;
  if (job.sampling.has_value() && !session->throwaway) {
    st->sampling.Apply(&session->state, *job.sampling);
  }
  metrics_->prompt_tokens += job.prompt.size();
  session->generating = true;
  session->last_used = absl::Now();
  streams_.push_back(std::move(st));
}

absl::Status EngineLoop::PrepareSession(const GenerateJob& job, Session* session,
                                        uint64_t* cached_tokens) {
  if (job.prompt.empty() && session->state.pending.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt: empty input, and session ", session->id,
                                                   " has no context to continue from"));
  }
  // Constrained decoding: the job's grammar from its start; a job with a prompt and none is
  // unconstrained; one with neither continues the session's unfinished grammar, if any.
  std::optional<SessionGrammar> grammar;
  if (job.grammar.has_value()) {
    absl::StatusOr<SessionGrammar> g = session->model->engine->StartGrammar(*job.grammar);
    if (!g.ok()) return g.status();
    grammar = std::move(*g);
  } else if (job.prompt.empty()) {
    grammar = session->state.grammar;
  }
  const ModelConfig& cfg = session->model->config();
  if (!cfg.is_linear()) {
    const int64_t need = session->state.context_tokens() + static_cast<int64_t>(job.prompt.size()) +
                         job.max_new_tokens;
    if (need > cfg.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_new_tokens: context ", session->state.context_tokens(), " + prompt ",
          job.prompt.size(), " + max_new_tokens ", job.max_new_tokens,
          " exceeds the model's max_position_embeddings ", cfg.max_position_embeddings));
    }
  }
  absl::StatusOr<int64_t> cached =
      session->model->engine->AppendPrompt(&session->state, job.prompt);
  if (!cached.ok()) {
    return absl::Status(cached.status().code(),
                        absl::StrCat("prompt: ", cached.status().message()));
  }
  *cached_tokens = static_cast<uint64_t>(*cached);
  session->state.grammar = std::move(grammar);
  return absl::OkStatus();
}

void EngineLoop::StepModel(LoadedModel* model) {
  Engine* engine = model->engine.get();
  std::vector<Stream*> active;
  std::vector<StreamDemand> demand;
  for (auto& st : streams_) {
    if (st->done || st->session->model != model) continue;
    if (FinishIfCancelled(st.get())) continue;
    const SessionState& s = st->session->state;
    active.push_back(st.get());
    demand.push_back(StreamDemand{s.position, static_cast<int64_t>(s.pending.size()),
                                  static_cast<int64_t>(s.kv_blocks.size()),
                                  st->session->throwaway});
  }
  if (active.empty()) return;

  KvBlockPool* pool = engine->kv_pool();
  const Scheduler scheduler(SchedulerLimits{options_.step_token_budget, engine->chunk_size(),
                                            pool != nullptr ? pool->block_size() : 0});
  // Blocks only the prefix cache holds count as free: admission takes them back (engine.h).
  const int64_t free_blocks = engine->KvBlocksAvailable();
  const std::vector<StreamStep> plan = scheduler.Plan(demand, free_blocks);
  std::vector<StepRequest> reqs;
  std::vector<Stream*> owners;
  // n > 1: the choices forked in this step (sessions, and their states for the engine), per request.
  std::vector<std::vector<Session*>> choice_sessions(active.size());
  std::vector<std::vector<SessionState*>> choice_states(active.size());
  // Speculative drafts, per request; their KV rows come out of the blocks no run of the plan took.
  std::vector<std::vector<int32_t>> drafts(active.size());
  int64_t spare_blocks = free_blocks;
  // The step's decoding rows so far (drafts add theirs) and the streams that wait for it: what a
  // draft's verification costs (StepCostModel::Costs).
  int base_rows = 0, streams = 0;
  for (const StreamStep& p : plan) {
    if (p.action != StreamAction::kRun) continue;
    spare_blocks -= p.kv_blocks;
    base_rows += static_cast<int>(p.tokens);
    ++streams;
  }
  StepCostModel& step_cost = step_costs_[model];
  // Every request is one decoding row plus its draft: the step's time is recorded.
  bool decode_only = true;
  for (size_t i = 0; i < active.size(); ++i) {
    if (plan[i].action == StreamAction::kRun) {
      StepRequest req;
      req.session = &active[i]->session->state;
      req.max_tokens = plan[i].tokens;
      req.logprobs = active[i]->logprobs;
      const int64_t pending = static_cast<int64_t>(active[i]->session->state.pending.size());
      const bool decoding = plan[i].tokens == 1 && pending == 1;
      decode_only = decode_only && decoding;
      if (active[i]->choices.has_value() && plan[i].tokens >= pending) {
        choice_sessions[reqs.size()] = StartChoices(active[i], &choice_states[reqs.size()]);
        req.choices = choice_states[reqs.size()];
        decode_only = false;
      } else if (active[i]->drafter != nullptr && decoding) {
        drafts[reqs.size()] = DraftFor(active[i], engine, plan[i].kv_blocks, &spare_blocks,
                                       &step_cost, base_rows, streams);
        req.draft = drafts[reqs.size()];
        base_rows += static_cast<int>(req.draft.size());
      }
      reqs.push_back(req);
      owners.push_back(active[i]);
    } else if (plan[i].action == StreamAction::kKvExhausted) {
      FinishStream(active[i], FinishReason::kKvPoolFull,
                   absl::ResourceExhaustedError(absl::StrCat(
                       "KV block pool of model '", model->name, "' is full: session ",
                       active[i]->session->id, " needs ", plan[i].kv_blocks, " more blocks, ",
                       free_blocks, " free of ", pool->blocks_total())));
    }
  }
  if (reqs.empty()) return;

  std::vector<StepResult> results;
  const absl::Time t0 = absl::Now();
  (void)engine->Step(reqs, &results);  // per-request statuses below
  const absl::Time t1 = absl::Now();
  metrics_->engine_steps++;
  metrics_->step_seconds.Observe(absl::ToDoubleSeconds(t1 - t0));
  metrics_->step_batch_size.Observe(static_cast<double>(reqs.size()));
  if (decode_only && results.size() == reqs.size()) {
    int rows = 0;
    for (const StepResult& r : results) {
      decode_only = decode_only && r.status.ok();
      rows += 1 + r.drafted;
    }
    if (decode_only) step_cost.ObserveStep(rows, absl::ToDoubleSeconds(t1 - t0));
  }
  int64_t ran = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    const StepResult& r = results[i];
    if (!choice_sessions[i].empty()) {
      if (r.status.ok() && r.sampled) {
        AdoptChoices(owners[i], choice_sessions[i], r);
      } else {
        DropChoiceSessions(choice_sessions[i]);
      }
    }
    if (!r.status.ok()) {
      FinishStream(owners[i],
                   r.status.code() == absl::StatusCode::kResourceExhausted
                       ? FinishReason::kKvPoolFull
                       : FinishReason::kEngineError,
                   absl::Status(r.status.code(),
                                absl::StrCat("model '", model->name, "': ", r.status.message())));
      continue;
    }
    ran += r.consumed;
    if (r.sampled) EmitToken(owners[i], r);
  }
  metrics_->step_tokens.Observe(static_cast<double>(ran));
}

void EngineLoop::FinishStream(Stream* st, FinishReason reason, const absl::Status& status) {
  if (st->done) return;
  st->done = true;
  Session* session = st->session;
  session->generating = false;
  session->last_used = absl::Now();
  st->sampling.Restore(&session->state);
  if (session->throwaway && status.ok()) {
    std::string tail = session->decoder.Flush();
    if (!tail.empty()) st->sink->OnTokens({}, std::move(tail));
  }
  const GenerateSummary sum{session->id,
                            session->model->name,
                            reason,
                            st->prompt_tokens,
                            st->cached_prompt_tokens,
                            st->generated,
                            static_cast<uint64_t>(session->state.context_tokens()),
                            session->model->engine->SessionBytes(session->state),
                            st->generated >= 2 ? static_cast<uint64_t>(absl::ToInt64Microseconds(
                                                     st->last_token - st->first_token))
                                               : 0};
  if (options_.log_requests)
    LogGenerate(sum, session->throwaway, absl::Now() - st->arrival, status);
  // Shared store: the turn is written through before the client hears it ended, so a turn it saw
  // finish survives this replica's death. A failed write is counted and logged (Persist).
  (void)sessions_.Persist(session);
  if (keeper_ != nullptr && session->lease.has_value()) keeper_->Untrack(session->lease->token);
  TurnLease(store_.get(), std::exchange(session->lease, std::nullopt)).Release();
  st->sink->OnFinish(sum, status);
  if (session->throwaway) sessions_.Erase(session);
  st->session = nullptr;
  // Choices not forked yet (the stream ended before its prompt's last step) end the same way.
  if (st->choices.has_value()) {
    GenerateSummary none = sum;
    none.session_id.clear();
    none.generated_tokens = 0;
    for (const auto& sink : st->choices->sinks) sink->OnFinish(none, status);
    st->choices.reset();
  }
}

bool EngineLoop::FinishIfCancelled(Stream* st) {
  if (!st->sink->Cancelled()) return false;
  FinishStream(st, FinishReason::kCancelled, absl::CancelledError("cancelled"));
  return true;
}

void EngineLoop::ReapFinished() {
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [](const std::unique_ptr<Stream>& s) { return s->done; }),
                 streams_.end());
}

}  // namespace flatstate::server
