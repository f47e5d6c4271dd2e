// Engine: speculative steps (StepRequest::draft): which drafts a step verifies, the in-order
// draws from a verification run's rows, and the roll-back to the tokens kept.
#include <algorithm>
#include <utility>
#include <vector>

#include "engine/runtime/engine.h"

namespace flatstate {

std::span<const int32_t> Engine::UsableDraft(const StepRequest& request, const SessionState& s,
                                             int64_t planned) const {
  if (request.draft.empty() || !request.sample || !request.choices.empty() ||
      !forward_->supports_stepwise() || planned != 1 || s.pending.size() != 1 ||
      !s.prefix_marks.empty()) {
    return {};
  }
  if (!ValidateTokens(request.draft).ok()) return {};
  std::span<const int32_t> draft = request.draft;
  if (config().has_kv()) {  // the draft's rows must stay within max_position_embeddings
    const int64_t room = config().max_position_embeddings - s.context_tokens();
    if (room <= 0) return {};
    draft = draft.first(static_cast<size_t>(std::min<int64_t>(room, std::ssize(draft))));
  }
  return draft;
}

void Engine::DrawVerified(const StepRequest& request, std::span<const int32_t> draft,
                          const float* rows, StepResult* result, SamplerScratch* scratch) const {
  const int V = config().vocab_size;
  const std::vector<int32_t>& eos = config().eos_token_ids;
  for (size_t j = 0; j <= draft.size(); ++j) {
    StepResult one;
    Draw(request, rows + static_cast<int64_t>(j) * V, &one, scratch);
    if (!one.sampled) {
      // Nothing allowed here (a grammar's dead end). After accepted tokens the step ends with the
      // last of them, as the plain step that drew it did; the next step meets the dead end.
      if (j == 0) {
        result->status = std::move(one.status);
        return;
      }
      result->token = result->accepted.back();
      result->accepted.pop_back();
      if (request.logprobs >= 0) {
        result->logprobs = std::move(result->accepted_logprobs.back());
        result->accepted_logprobs.pop_back();
      }
      result->sampled = true;
      return;
    }
    const bool is_eos = std::find(eos.begin(), eos.end(), one.token) != eos.end();
    if (j < draft.size() && one.token == draft[j] && !one.grammar_done && !is_eos) {
      result->accepted.push_back(one.token);
      if (request.logprobs >= 0) result->accepted_logprobs.push_back(std::move(one.logprobs));
      continue;
    }
    result->token = one.token;
    result->logprobs = std::move(one.logprobs);
    result->grammar_done = one.grammar_done;
    result->sampled = true;
    return;
  }
}

void Engine::SettleSpeculation(std::span<const StepRequest> requests,
                               std::vector<StepResult>* results) {
  const size_t floats = config().state_floats();
  for (Speculation& sp : spec_) {
    const size_t i = run_of_[sp.run];
    StepResult& res = (*results)[i];
    SessionState* s = requests[i].session;
    // Tokens of the run that stay in the context: the pending one and the accepted drafts.
    const int64_t keep = 1 + static_cast<int64_t>(res.accepted.size());
    res.consumed = keep;
    if (keep == static_cast<int64_t>(sp.tokens.size())) continue;
    s->position = sp.position + keep;  // softmax rows past it are never read, then overwritten
    if (kv_ != nullptr) {
      const int64_t blocks = KvBlockPool::BlocksFor(sp.position + keep, kv_->block_size());
      kv_->Truncate(&s->kv_blocks, std::max(sp.table_before, static_cast<size_t>(blocks)));
    }
    if (floats > 0) {  // record keep - 1 is the state after the last kept token
      std::copy_n(
          spec_steps_.begin() + static_cast<std::ptrdiff_t>(sp.steps_offset + (keep - 1) * floats),
          floats, s->linear.begin());
    }
  }
}

}  // namespace flatstate
