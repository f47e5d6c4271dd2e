// EngineLoop: n > 1 choices of one request (GenerateChoices). The first choice's stream prefills
// the prompt; when the rest of its prompt runs in one step, SpawnChoices forks its session once
// per other choice (Engine::Fork: KV blocks shared, state copied) and gives each fork a stream of
// its own, re-seeded, which from then on runs like any other stream.
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/runtime/step_plan.h"
#include "server/loop/engine_loop.h"

namespace flatstate::server {

void EngineLoop::GenerateChoices(GenerateJob job, std::vector<std::shared_ptr<TokenSink>> sinks) {
  if (sinks.empty()) return;
  auto j = std::make_shared<GenerateJob>(std::move(job));
  auto s = std::make_shared<std::vector<std::shared_ptr<TokenSink>>>(std::move(sinks));
  Post([this, j, s] {
    std::shared_ptr<TokenSink> first = std::move(s->front());
    s->erase(s->begin());
    AdmitStream(std::move(*j), std::move(first), std::move(*s));
  });
}

void EngineLoop::SpawnChoices(LoadedModel* model) {
  std::vector<std::unique_ptr<Stream>> spawned;
  for (auto& st : streams_) {
    if (st->done || !st->choices.has_value() || st->session->model != model) continue;
    const SessionState& s = st->session->state;
    if (!RunsInOneStep(s.position, static_cast<int64_t>(s.pending.size()),
                       model->engine->chunk_size())) {
      continue;
    }
    PendingChoices choices = std::move(*st->choices);
    st->choices.reset();
    for (size_t i = 0; i < choices.sinks.size(); ++i) {
      std::shared_ptr<TokenSink>& sink = choices.sinks[i];
      const uint64_t seed = choices.seed + choices.first + i;
      absl::StatusOr<Session*> fork = sessions_.Fork(st->session, /*throwaway=*/true);
      if (!fork.ok()) {
        GenerateSummary fail{"", model->name, FinishReason::kRejected, st->prompt_tokens};
        sink->OnFinish(fail, absl::Status(fork.status().code(),
                                          absl::StrCat("n: choice ", choices.first + i,
                                                       " could not be forked: ",
                                                       fork.status().message())));
        continue;
      }
      Session* f = *fork;
      f->state.sampling.seed = seed;
      f->state.rng = Rng(seed);
      f->generating = true;
      auto c = std::make_unique<Stream>();
      c->session = f;
      c->sink = std::move(sink);
      c->max_new_tokens = st->max_new_tokens;
      c->prompt_tokens = st->prompt_tokens;
      c->cached_prompt_tokens = st->cached_prompt_tokens;
      c->logprobs = st->logprobs;
      c->eos = st->eos;
      c->text = StreamText(choices.stop);
      c->arrival = st->arrival;
      c->last_token = st->last_token;
      spawned.push_back(std::move(c));
    }
  }
  for (auto& c : spawned) streams_.push_back(std::move(c));
}

}  // namespace flatstate::server
