// Where a constrained generation stands in its grammar: the set of live parse stacks (a
// pushdown automaton, as llama.cpp's grammar sampler keeps) and the UTF-8 cursor, advanced a byte
// at a time.
//
// Owns its stacks and shares the (immutable) CompiledGrammar. A value type: copy it to fork a
// generation (n > 1). Thread-compatible: one thread mutates a state at a time; const methods
// may run concurrently.
//
// Failures: Advance refuses bytes the grammar rejects with InvalidArgument (the state is left as
// it was) and an over-ambiguous grammar with ResourceExhausted (GrammarLimits::max_stacks).
// Deserialize refuses a corrupt or truncated blob with DataLoss and a blob from another grammar
// with FailedPrecondition; a restored stack holds only valid entries for the grammar (a terminal
// on top, rule continuations below, within the limits), which the checksum then vouches for.
#ifndef FLATSTATE_ENGINE_GRAMMAR_GRAMMAR_STATE_H_
#define FLATSTATE_ENGINE_GRAMMAR_GRAMMAR_STATE_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/grammar/code_points.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/parse_stacks.h"

namespace flatstate::grammar {

class GrammarState {
 public:
  // The state before any output.
  static absl::StatusOr<GrammarState> Start(std::shared_ptr<const CompiledGrammar> grammar,
                                            const GrammarLimits& limits = {});

  // Whether Advance(bytes) would succeed. Does not change the state.
  bool Accepts(std::string_view bytes) const;
  // Consumes `bytes` (a sampled token's bytes). All or nothing.
  absl::Status Advance(std::string_view bytes);
  // Whether the output so far is a complete match (generation may end here: allow EOS).
  bool IsComplete() const { return cursor_.AtBoundary() && stacks_.HasEmpty(); }
  // Whether some byte can follow (false: complete and nothing more may come).
  bool CanContinue() const;

  // A compact blob (a few bytes per stack entry) for session checkpoints.
  std::string Serialize() const;
  static absl::StatusOr<GrammarState> Deserialize(std::shared_ptr<const CompiledGrammar> grammar,
                                                  std::string_view blob,
                                                  const GrammarLimits& limits = {});

  const CompiledGrammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const CompiledGrammar>& shared_grammar() const { return grammar_; }
  const GrammarLimits& limits() const { return limits_; }
  const StackSet& stacks() const { return stacks_; }
  const Utf8Cursor& cursor() const { return cursor_; }
  // The stacks and cursor as bytes, without grammar fingerprint or checksum: equal keys mean equal
  // states of one grammar (TokenMasker caches masks by it).
  std::string Key() const;

  bool operator==(const GrammarState& o) const {
    return grammar_ == o.grammar_ && stacks_ == o.stacks_ && cursor_.lead == o.cursor_.lead &&
           cursor_.need == o.cursor_.need && cursor_.value == o.cursor_.value;
  }

 private:
  GrammarState(std::shared_ptr<const CompiledGrammar> grammar, const GrammarLimits& limits)
      : grammar_(std::move(grammar)), limits_(limits) {}
  // Runs `bytes` from (stacks, cursor), updating both; an error says which byte failed.
  absl::Status Run(std::string_view bytes, StackSet* stacks, Utf8Cursor* cursor) const;

  std::shared_ptr<const CompiledGrammar> grammar_;
  GrammarLimits limits_;
  StackSet stacks_;
  Utf8Cursor cursor_;
};

}  // namespace flatstate::grammar

#endif  // FLATSTATE_ENGINE_GRAMMAR_GRAMMAR_STATE_H_
