#include "engine/sampling/grammar_constraint.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"

namespace flatstate {

absl::StatusOr<std::shared_ptr<const GrammarConstraint>> GrammarConstraint::Create(
    std::string gbnf, std::shared_ptr<const GrammarVocabulary> vocab) {
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> g =
      grammar::CompiledGrammar::FromGbnf(gbnf);
  if (!g.ok()) {
    return absl::Status(g.status().code(), absl::StrCat("grammar: ", g.status().message()));
  }
  auto c = std::shared_ptr<GrammarConstraint>(new GrammarConstraint());
  c->source_ = std::move(gbnf);
  c->grammar_ = std::move(*g);
  c->masker_ = std::make_unique<grammar::TokenMasker>(c->grammar_, vocab->trie);
  c->vocab_ = std::move(vocab);
  return std::shared_ptr<const GrammarConstraint>(std::move(c));
}

absl::Status GrammarConstraint::Mask(const grammar::GrammarState& state,
                                     std::span<float> logits) const {
  thread_local grammar::TokenMask mask;
  RETURN_IF_ERROR(masker_->ComputeMask(state, vocab_->eos_ids, &mask));
  bool any = false;
  for (uint64_t w : mask.words()) any = any || w != 0;
  if (!any) {
    return absl::FailedPreconditionError(
        "grammar: no token of the model's vocabulary can continue the constrained output");
  }
  grammar::ApplyTokenMask(mask, logits);
  return absl::OkStatus();
}

absl::Status GrammarConstraint::Advance(grammar::GrammarState* state, int32_t token) const {
  for (int32_t e : vocab_->eos_ids) {
    if (e == token) return absl::OkStatus();
  }
  if (token < 0 || static_cast<size_t>(token) >= vocab_->token_bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: token ", token, " is outside the vocabulary"));
  }
  return state->Advance(vocab_->token_bytes[static_cast<size_t>(token)]);
}

absl::StatusOr<std::shared_ptr<const GrammarConstraint>> GrammarCache::Get(std::string_view gbnf) {
  if (auto it = by_source_.find(absl::string_view(gbnf.data(), gbnf.size()));
      it != by_source_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return *it->second;
  }
  if (vocab_ == nullptr) {
    ASSIGN_OR_RETURN(vocab_, build_vocab_());
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const GrammarConstraint> c,
                   GrammarConstraint::Create(std::string(gbnf), vocab_));
  ++compiled_;
  if (lru_.size() >= capacity_ && !lru_.empty()) {
    by_source_.erase(lru_.back()->source());
    lru_.pop_back();
  }
  lru_.push_front(c);
  by_source_[c->source()] = lru_.begin();
  return c;
}

}  // namespace flatstate
