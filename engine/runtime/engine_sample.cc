// Engine: drawing a step's tokens (Engine::Draw) and constrained decoding (docs/grammar.md).
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/runtime/engine.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

// Advances `g` by `token`; *done when the grammar cannot continue past it (or it was an EOS),
// and then `g` is cleared.
absl::Status AdvanceGrammar(std::optional<SessionGrammar>* g, int32_t token,
                            const std::vector<int32_t>& eos, bool* done) {
  RETURN_IF_ERROR((*g)->constraint->Advance(&(*g)->state, token));
  bool is_eos = false;
  for (int32_t e : eos) is_eos = is_eos || e == token;
  *done = is_eos || !(*g)->state.CanContinue();
  if (*done) g->reset();
  return absl::OkStatus();
}

// Masked rows: the top alternatives only among the allowed tokens.
TokenLogprobs MaskedLogprobs(const float* logits, int vocab, int32_t token, int top) {
  TokenLogprobs lp = ComputeLogprobs(logits, vocab, token, top);
  std::erase_if(lp.top, [](const auto& e) { return std::isinf(e.second); });
  return lp;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const GrammarVocabulary>> BuildGrammarVocabulary(
    const Model& model) {
  const Tokenizer& tok = model.tokenizer();
  if (!tok.has_text()) {
    return absl::FailedPreconditionError(
        absl::StrCat("grammar: model's tokenizer (", std::string(tok.kind()),
                     ") knows no token text, so output cannot be constrained by a grammar"));
  }
  auto v = std::make_shared<GrammarVocabulary>();
  const int n = tok.vocab_size();
  v->token_bytes.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v->token_bytes[static_cast<size_t>(i)] = tok.TokenBytes(i);
  std::vector<int32_t> special;
  for (int32_t id : tok.SpecialIds()) {
    if (id >= 0 && id < n) special.push_back(id);
  }
  for (int32_t id : model.config().eos_token_ids) {
    if (id >= 0 && id < n) {
      special.push_back(id);
      v->eos_ids.push_back(id);
    }
  }
  ASSIGN_OR_RETURN(v->trie, grammar::VocabularyTrie::Build(v->token_bytes, special));
  return std::shared_ptr<const GrammarVocabulary>(std::move(v));
}

absl::StatusOr<std::shared_ptr<const GrammarConstraint>> Engine::CompileGrammar(
    std::string_view gbnf) {
  return grammars_->Get(gbnf);
}

absl::StatusOr<SessionGrammar> Engine::StartGrammar(std::string_view gbnf) {
  ASSIGN_OR_RETURN(std::shared_ptr<const GrammarConstraint> c, CompileGrammar(gbnf));
  ASSIGN_OR_RETURN(grammar::GrammarState state, c->Start());
  return SessionGrammar{std::move(c), std::move(state)};
}

void Engine::Draw(const StepRequest& request, const float* logits, StepResult* res,
                  SamplerScratch* scratch) const {
  const int V = config().vocab_size;
  SessionState* s = request.session;
  const bool constrained = s->grammar.has_value();
  if (constrained) {
    // Only this row, from this session's state: batch composition cannot change it.
    thread_local std::vector<float> masked;
    masked.assign(logits, logits + V);
    if (absl::Status st = s->grammar->constraint->Mask(s->grammar->state, masked); !st.ok()) {
      res->status = std::move(st);
      for (ChoiceDraw& d : res->choices) {
        if (d.status.ok()) d.status = res->status;
      }
      return;
    }
    logits = masked.data();
  }
  auto logprobs = [&](int32_t token) {
    return constrained ? MaskedLogprobs(logits, V, token, request.logprobs)
                       : ComputeLogprobs(logits, V, token, request.logprobs);
  };
  const std::vector<int32_t>& eos = config().eos_token_ids;
  // The choices' grammar states are copies of the session's before this token (ForkChoices).
  for (size_t k = 0; k < res->choices.size(); ++k) {
    ChoiceDraw& d = res->choices[k];
    if (!d.status.ok()) continue;
    SessionState* c = request.choices[k];
    d.token = SampleToken(logits, V, c->sampling, &c->rng, scratch);
    if (request.logprobs >= 0) d.logprobs = logprobs(d.token);
    if (c->grammar.has_value()) {
      d.status = AdvanceGrammar(&c->grammar, d.token, eos, &d.grammar_done);
    }
  }
  res->token = SampleToken(logits, V, s->sampling, &s->rng, scratch);
  if (request.logprobs >= 0) res->logprobs = logprobs(res->token);
  if (constrained) {
    if (absl::Status st = AdvanceGrammar(&s->grammar, res->token, eos, &res->grammar_done);
        !st.ok()) {
      res->status = std::move(st);
      return;
    }
  }
  res->sampled = true;
}

}  // namespace flatstate
