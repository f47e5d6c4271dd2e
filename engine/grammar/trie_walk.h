// The depth-first walk of a VocabularyTrie against a set of parse stacks (TokenMasker's core).
//
// Marks in a TokenMask every token whose bytes the stacks accept, pruning a subtree as soon as no
// stack survives its prefix. The sets of stacks met on the way are interned and their transitions
// by byte memoized (a lazily built DFA): most trie nodes then cost one table lookup, since a walk
// meets few distinct sets (inside a JSON string, every ordinary character leads back to the same
// one). In bottom mode (stacks whose lowest entry is kBottom) it also records each trie node at
// which some path pops into kBottom: what follows there depends on the stack the walked stacks
// were cut from. Not thread-safe: one walk per thread. Fails with ResourceExhausted past
// kMaxWalkStates distinct sets or when the stepper does.
#ifndef FLATSTATE_ENGINE_GRAMMAR_TRIE_WALK_H_
#define FLATSTATE_ENGINE_GRAMMAR_TRIE_WALK_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/grammar/code_points.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/parse_stacks.h"
#include "engine/grammar/vocab_trie.h"

namespace flatstate::grammar {

class TokenMask;

inline constexpr size_t kMaxWalkStates = size_t{1} << 16;  // a few MiB of interned states

class TrieWalk {
 public:
  TrieWalk(const CompiledGrammar& g, const VocabularyTrie& trie, const GrammarLimits& limits)
      : grammar_(g), trie_(trie), stepper_(g, limits) {}

  // Marks the tokens below the root that `stacks` (at `cursor`) accept. With `bottoms`, appends
  // (node, depth) for every node where a path reaches [kBottom]; such a path does not mark.
  absl::Status Run(const StackSet& stacks, const Utf8Cursor& cursor, TokenMask* mask,
                   std::vector<std::pair<uint32_t, uint32_t>>* bottoms = nullptr);
  const StackStepper& stepper() const { return stepper_; }

 private:
  struct State {
    StackSet stacks;
    Utf8Cursor cursor;
    ByteSet next;  // a superset of the bytes it can take
    bool live;     // some stack other than [kBottom]
    bool bottom;   // the stack [kBottom] is among them
  };
  static constexpr int32_t kDead = -1;

  int32_t Intern(const StackSet& stacks, const Utf8Cursor& cursor);
  int32_t Step(int32_t from, uint8_t byte);
  void Canonicalize(const StackSet& stacks, Utf8Cursor* cursor) const;
  void Visit(uint32_t node, int32_t state, size_t depth);

  const CompiledGrammar& grammar_;
  const VocabularyTrie& trie_;
  StackStepper stepper_;
  std::vector<State> states_;
  absl::flat_hash_map<std::string, int32_t> ids_;
  absl::flat_hash_map<uint64_t, int32_t> transitions_;  // (state << 8 | byte) -> state or kDead
  StackSet scratch_;
  std::string key_;
  TokenMask* mask_ = nullptr;
  std::vector<std::pair<uint32_t, uint32_t>>* bottoms_ = nullptr;
  absl::Status status_;
};

}  // namespace flatstate::grammar

#endif  // FLATSTATE_ENGINE_GRAMMAR_TRIE_WALK_H_
