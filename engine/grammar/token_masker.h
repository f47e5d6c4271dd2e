// Allowed-token masks for a GrammarState over a model's vocabulary.
//
// The reference walk (ComputeMaskUncached) goes down the shared VocabularyTrie depth first,
// advancing the state's parse stacks by each edge's byte and pruning a subtree as soon as its
// prefix is rejected: a step costs the trie nodes the grammar allows, never a vocabulary scan.
// ComputeMask gives the same mask faster. The mask of a set of stacks is the union of each
// stack's; a stack's tokens split into those decided within its top `key_frames` entries (the
// key: e.g. "inside a JSON string") and those whose walk pops below the key. For each key (and
// UTF-8 cursor) the first pays one walk with the stack cut below the key; it yields the tokens
// the key accepts whatever lies below, and a small trie of the rest's remaining bytes, which each
// later step walks against the real stack below the key. Whole-state masks are cached too (states
// recur: every array element). Each cache holds at most `cache_entries` entries, and is emptied
// when full.
//
// Owns the caches; shares grammar and trie. Thread-safe: ComputeMask may run on many threads at
// once (walks hold no lock; the caches are guarded by a mutex). The server applies a mask to the
// logits before sampling (disallowed -> -inf); a mask depends only on the state, so batch
// composition cannot change it. Fails with InvalidArgument for a state of another grammar or an
// EOS id outside the vocabulary, ResourceExhausted if parse stacks overflow their limits (the
// fast path checks max_stacks per stack, not for the whole set; see docs/grammar.md).
#ifndef FLATSTATE_ENGINE_GRAMMAR_TOKEN_MASKER_H_
#define FLATSTATE_ENGINE_GRAMMAR_TOKEN_MASKER_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_state.h"
#include "engine/grammar/vocab_trie.h"

namespace flatstate::grammar {

// One bit per token id.
class TokenMask {
 public:
  TokenMask() = default;
  explicit TokenMask(size_t vocab_size) { Reset(vocab_size); }
  void Reset(size_t vocab_size) {
    size_ = vocab_size;
    words_.assign((vocab_size + 63) / 64, 0);
  }
  void Allow(int32_t id) { words_[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
  bool allowed(int32_t id) const { return (words_[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1; }
  size_t size() const { return size_; }
  size_t CountAllowed() const;
  const std::vector<uint64_t>& words() const { return words_; }
  std::vector<uint64_t>& mutable_words() { return words_; }

 private:
  size_t size_ = 0;
  std::vector<uint64_t> words_;
};

struct TokenMaskerOptions {
  uint32_t key_frames = 3;
  size_t cache_entries = 1024;
  bool cache_states = true;  // false: only the per-key cache (benchmarks)
};

// Sets logits[id] = -inf for every id the mask does not allow, ids past the mask's vocabulary
// included (models often pad their output rows past the tokenizer's vocabulary).
void ApplyTokenMask(const TokenMask& mask, std::span<float> logits);

class TokenMasker {
 public:
  TokenMasker(std::shared_ptr<const CompiledGrammar> grammar,
              std::shared_ptr<const VocabularyTrie> trie, const TokenMaskerOptions& options = {});

  // *mask = the tokens whose bytes `state` accepts, plus `eos_ids` when state.IsComplete().
  absl::Status ComputeMask(const GrammarState& state, const std::vector<int32_t>& eos_ids,
                           TokenMask* mask) const;
  // The same without the cache (tests and benchmarks).
  absl::Status ComputeMaskUncached(const GrammarState& state, const std::vector<int32_t>& eos_ids,
                                   TokenMask* mask) const;

  // Whole-state cache hits and misses, and keys walked (the cold cost).
  size_t cache_hits() const;
  size_t cache_misses() const;
  size_t keys_built() const;

 private:
  struct KeyMask;
  absl::Status Walk(const GrammarState& state, TokenMask* mask) const;
  absl::Status FastMask(const GrammarState& state, TokenMask* mask) const;
  absl::StatusOr<std::shared_ptr<const KeyMask>> GetKeyMask(std::span<const uint32_t> key,
                                                            const Utf8Cursor& cursor,
                                                            const GrammarLimits& limits) const;
  absl::Status AddEos(const GrammarState& state, const std::vector<int32_t>& eos_ids,
                      TokenMask* mask) const;

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::shared_ptr<const VocabularyTrie> trie_;
  TokenMaskerOptions options_;
  mutable std::mutex mu_;
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const std::vector<uint64_t>>> states_;
  mutable absl::flat_hash_map<std::string, std::shared_ptr<const KeyMask>> keys_;
  mutable size_t hits_ = 0, misses_ = 0, keys_built_ = 0;
};

}  // namespace flatstate::grammar

#endif  // FLATSTATE_ENGINE_GRAMMAR_TOKEN_MASKER_H_
