// EngineLoop: n > 1 choices of one request (GenerateChoices). The first choice's stream prefills
// the prompt alone. In the step that runs the last part of its prompt, StepModel passes one fresh
// session per other choice (StartChoices) as StepRequest::choices: the engine forks the prompt's
// session into each right after the prompt ran and draws every choice's first token from the
// same logits with that choice's own sampler and RNG (seed + i). AdoptChoices then gives each
// choice a stream of its own, which from then on runs like any other stream. The prompt is
// prefilled once, whatever n.
#include <utility>

#include "absl/strings/str_cat.h"
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

std::vector<Session*> EngineLoop::StartChoices(Stream* st, std::vector<SessionState*>* states) {
  PendingChoices& ch = *st->choices;
  std::vector<Session*> sessions;
  std::vector<std::shared_ptr<TokenSink>> kept;
  for (size_t k = 0; k < ch.sinks.size(); ++k) {
    SamplingParams sampling = st->session->state.sampling;
    sampling.seed = ch.seed + 1 + k;
    absl::StatusOr<Session*> s = sessions_.Create(st->session->model, sampling, /*throwaway=*/true);
    if (!s.ok()) {
      GenerateSummary fail{"", st->session->model->name, FinishReason::kRejected,
                           st->prompt_tokens};
      ch.sinks[k]->OnFinish(fail, absl::Status(s.status().code(),
                                                absl::StrCat("n: choice ", k + 1, ": ",
                                                             s.status().message())));
      continue;
    }
    (*s)->generating = true;
    sessions.push_back(*s);
    states->push_back(&(*s)->state);
    kept.push_back(std::move(ch.sinks[k]));
  }
  ch.sinks = std::move(kept);  // sinks[k] now belongs to sessions[k]
  return sessions;
}

void EngineLoop::AdoptChoices(Stream* st, const std::vector<Session*>& sessions,
                              const StepResult& r) {
  PendingChoices ch = std::move(*st->choices);
  st->choices.reset();
  for (size_t k = 0; k < sessions.size(); ++k) {
    const ChoiceDraw& d = r.choices[k];
    if (!d.status.ok()) {
      GenerateSummary fail{"", st->session->model->name, FinishReason::kRejected,
                           st->prompt_tokens};
      sessions_.Erase(sessions[k]);
      ch.sinks[k]->OnFinish(fail, absl::Status(d.status.code(),
                                                absl::StrCat("n: a choice could not be forked: ",
                                                             d.status.message())));
      continue;
    }
    auto c = std::make_unique<Stream>();
    c->session = sessions[k];
    c->sink = std::move(ch.sinks[k]);
    c->max_new_tokens = st->max_new_tokens;
    c->prompt_tokens = st->prompt_tokens;
    c->cached_prompt_tokens = st->cached_prompt_tokens;
    c->logprobs = st->logprobs;
    c->eos = st->eos;
    c->text = StreamText(ch.stop);
    c->arrival = st->arrival;
    c->last_token = st->last_token;
    if (st->drafter != nullptr) {  // the prompt only: the original has not emitted its token yet
      c->drafter = st->drafter->Clone();
      c->max_draft = st->max_draft;
    }
    streams_.push_back(std::move(c));
    StepResult first;
    first.consumed = r.consumed;
    first.sampled = true;
    first.token = d.token;
    first.logprobs = d.logprobs;
    first.grammar_done = d.grammar_done;
    EmitToken(streams_.back().get(), first);
  }
}

void EngineLoop::DropChoiceSessions(const std::vector<Session*>& sessions) {
  for (Session* s : sessions) sessions_.Erase(s);
}

}  // namespace flatstate::server
