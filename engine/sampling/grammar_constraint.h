// Constrained decoding in the engine (docs/grammar.md): a grammar bound to one model's vocabulary
// (GrammarConstraint), a session's place in it (SessionGrammar, part of SessionState and of its
// checkpoints), and the per-model cache of compiled grammars (GrammarCache).
//
// GrammarConstraint owns its source text and shares the CompiledGrammar, the TokenMasker and the
// vocabulary's token bytes; immutable after Create, so thread-safe to share between sessions and
// to mask on many threads at once (TokenMasker is thread-safe). GrammarCache is not thread-safe:
// the engine's one thread uses it. Failures: Create / GrammarCache::Get return InvalidArgument
// naming the GBNF error ("grammar: GBNF 1:7: ..."); Mask fails with ResourceExhausted when the
// parse stacks overflow and FailedPrecondition when no token of the vocabulary can continue;
// Advance fails with InvalidArgument for a token the grammar rejects.
#ifndef FLATSTATE_ENGINE_SAMPLING_GRAMMAR_CONSTRAINT_H_
#define FLATSTATE_ENGINE_SAMPLING_GRAMMAR_CONSTRAINT_H_

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_state.h"
#include "engine/grammar/token_masker.h"
#include "engine/grammar/vocab_trie.h"

namespace flatstate {

// The bytes of every token of a vocabulary and the trie over them (special tokens left out).
struct GrammarVocabulary {
  std::vector<std::string> token_bytes;  // by id
  std::shared_ptr<const grammar::VocabularyTrie> trie;
  std::vector<int32_t> eos_ids;  // allowed once the grammar is complete
};

class GrammarConstraint {
 public:
  // Compiles `gbnf` for `vocab`. InvalidArgument "grammar: <GBNF error>".
  static absl::StatusOr<std::shared_ptr<const GrammarConstraint>> Create(
      std::string gbnf, std::shared_ptr<const GrammarVocabulary> vocab);

  const std::string& source() const { return source_; }
  const std::shared_ptr<const grammar::CompiledGrammar>& grammar() const { return grammar_; }
  absl::StatusOr<grammar::GrammarState> Start() const {
    return grammar::GrammarState::Start(grammar_);
  }
  // Sets every logit `state` does not allow to -inf (EOS only once it is complete). Depends only
  // on `state`, never on other rows. FailedPrecondition when nothing is allowed.
  absl::Status Mask(const grammar::GrammarState& state, std::span<float> logits) const;
  // Advances `state` by `token`'s bytes; an EOS id leaves it as it is.
  absl::Status Advance(grammar::GrammarState* state, int32_t token) const;

 private:
  GrammarConstraint() = default;
  std::string source_;
  std::shared_ptr<const GrammarVocabulary> vocab_;
  std::shared_ptr<const grammar::CompiledGrammar> grammar_;
  std::unique_ptr<grammar::TokenMasker> masker_;
};

// A session's grammar: the constraint and where its output stands. A value: copied by forks.
struct SessionGrammar {
  std::shared_ptr<const GrammarConstraint> constraint;
  grammar::GrammarState state;
};

// Compiled grammars of one model, by GBNF text, so repeated schemas do not recompile (and their
// TokenMasker caches stay warm). Holds at most `capacity` grammars, dropping the least recently
// used. The vocabulary (token bytes and trie) is built at the first Get.
class GrammarCache {
 public:
  // `build_vocab` makes the vocabulary (called once, at the first Get).
  using VocabBuilder = std::function<absl::StatusOr<std::shared_ptr<const GrammarVocabulary>>()>;
  explicit GrammarCache(VocabBuilder build_vocab, size_t capacity = 64)
      : build_vocab_(std::move(build_vocab)), capacity_(capacity) {}

  absl::StatusOr<std::shared_ptr<const GrammarConstraint>> Get(std::string_view gbnf);
  size_t compiled() const { return compiled_; }  // grammars compiled so far (cache misses)

 private:
  VocabBuilder build_vocab_;
  size_t capacity_;
  std::shared_ptr<const GrammarVocabulary> vocab_;
  std::list<std::shared_ptr<const GrammarConstraint>> lru_;  // most recent first
  absl::flat_hash_map<std::string, std::list<std::shared_ptr<const GrammarConstraint>>::iterator>
      by_source_;
  size_t compiled_ = 0;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SAMPLING_GRAMMAR_CONSTRAINT_H_
