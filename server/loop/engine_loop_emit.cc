// EngineLoop: emitting a step's tokens to a stream (EmitToken, a speculative step's accepted
// drafts first), a stream's drafter (MakeDrafter) and the drafts it verifies (DraftFor;
// docs/speculative.md).
#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/speculate/draft_model.h"
#include "engine/speculate/prompt_lookup.h"
#include "server/loop/engine_loop.h"

namespace flatstate::server {

void EngineLoop::EmitToken(Stream* st, const StepResult& r) {
  if (st->drafter != nullptr && r.drafted > 0) {
    st->drafter->Feedback(r.drafted, static_cast<int>(r.accepted.size()));
    metrics_->draft_tokens += static_cast<uint64_t>(r.drafted);
    metrics_->draft_tokens_accepted += r.accepted.size();
  }
  const TokenLogprobs none;
  for (size_t j = 0; j < r.accepted.size(); ++j) {
    const TokenLogprobs& lp = j < r.accepted_logprobs.size() ? r.accepted_logprobs[j] : none;
    if (!EmitOne(st, r.accepted[j], lp, false)) return;
  }
  EmitOne(st, r.token, r.logprobs, r.grammar_done);
}

bool EngineLoop::EmitOne(Stream* st, int32_t token, const TokenLogprobs& logprobs,
                         bool grammar_done) {
  const absl::Time now = absl::Now();
  if (st->generated == 0) {
    st->first_token = now;
    metrics_->time_to_first_token.Observe(absl::ToDoubleSeconds(now - st->arrival));
  } else {
    metrics_->inter_token_latency.Observe(absl::ToDoubleSeconds(now - st->last_token));
  }
  st->last_token = now;
  ++st->generated;
  ++tokens_generated_;
  metrics_->tokens_generated++;
  if (st->drafter != nullptr) st->drafter->Append(std::span<const int32_t>(&token, 1));
  if (std::find(st->eos.begin(), st->eos.end(), token) != st->eos.end()) {
    // End of sequence: counted, in the session's context, not sent (inference.proto, EOS).
    FinishStream(st, FinishReason::kEos, absl::OkStatus());
    return false;
  }
  std::string text;
  // A grammar that is complete and can go no further ends the output like a stop string.
  const bool stopped = st->text.Push(&st->session->decoder, token, &text) || grammar_done;
  if (st->logprobs >= 0) st->sink->OnLogprobs(logprobs);
  st->sink->OnTokens({token}, std::move(text));
  if (stopped) {
    FinishStream(st, FinishReason::kStop, absl::OkStatus());
    return false;
  }
  if (st->generated >= st->max_new_tokens) {
    FinishStream(st, FinishReason::kLength, absl::OkStatus());
    return false;
  }
  return true;
}

std::unique_ptr<Drafter> EngineLoop::MakeDrafter(const LoadedModel& model, int max_draft) {
  LoadedModel* draft =
      options_.draft_model.empty() ? nullptr : models_.Find(options_.draft_model);
  if (draft != nullptr && draft != &model &&
      draft->config().vocab_size == model.config().vocab_size) {
    return std::make_unique<DraftModelDrafter>(draft->engine.get(), max_draft);
  }
  return std::make_unique<PromptLookupDrafter>(PromptLookupOptions{.max_draft = max_draft});
}

std::vector<int32_t> EngineLoop::DraftFor(Stream* st, Engine* engine, int64_t plan_blocks,
                                          int64_t* spare_blocks, StepCostModel* step_cost,
                                          int base_rows, int streams) {
  // The step's own draw is one token; the draft may add at most what the stream has left.
  const int64_t left = static_cast<int64_t>(st->max_new_tokens) - st->generated - 1;
  // Unpaced, verification is taken to cost nothing: the pacer always proposes its longest.
  const std::vector<double> cost =
      options_.pace_drafts ? step_cost->Costs(base_rows, streams, st->max_draft)
                           : std::vector<double>(static_cast<size_t>(st->max_draft) + 1, 1.0);
  const absl::Time t0 = absl::Now();
  std::vector<int32_t> d =
      st->drafter->Draft(static_cast<int>(std::min<int64_t>(st->max_draft, left)), cost);
  if (!d.empty()) {
    step_cost->ObserveDraft(static_cast<int>(d.size()), absl::ToDoubleSeconds(absl::Now() - t0));
  }
  for (size_t j = 0; j < d.size(); ++j) {
    if (std::find(st->eos.begin(), st->eos.end(), d[j]) != st->eos.end()) {
      d.resize(j);
      break;
    }
  }
  // Nor past a stop string: accepted tokens are run, and a session that lives on must end where
  // its reply does. The step's own draw may still complete one, as a plain step's may.
  d.resize(st->text.TokensBeforeStop(st->session->decoder, d));
  const KvBlockPool* pool = engine->kv_pool();
  if (pool != nullptr && !d.empty()) {
    const SessionState& s = st->session->state;
    const int64_t more =
        KvBlockPool::BlocksNeeded(static_cast<int64_t>(s.kv_blocks.size()),
                                  s.position + 1 + static_cast<int64_t>(d.size()),
                                  pool->block_size()) -
        plan_blocks;
    if (more > *spare_blocks) return {};
    *spare_blocks -= std::max<int64_t>(more, 0);
  }
  return d;
}

}  // namespace flatstate::server
