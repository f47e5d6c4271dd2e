// A byte trie over a model's vocabulary, built once per tokenizer and shared by every
// constrained request (TokenMasker walks it against a GrammarState).
//
// Owns copies of nothing but the trie: nodes, edge labels and token ids. Immutable after Build;
// thread-safe to share (std::shared_ptr<const VocabularyTrie>). Tokens with no bytes and the ids
// listed as special never enter the trie, so a grammar never allows them (EOS is the caller's:
// TokenMasker::ComputeMask allows the ids it is given once the grammar is complete).
// Build fails with InvalidArgument for a special id outside the vocabulary.
#ifndef FLATSTATE_ENGINE_GRAMMAR_VOCAB_TRIE_H_
#define FLATSTATE_ENGINE_GRAMMAR_VOCAB_TRIE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace flatstate::grammar {

class VocabularyTrie {
 public:
  struct Node {
    uint32_t first_child = 0;  // children are nodes [first_child, first_child + num_children)
    uint32_t num_children = 0;
    uint32_t first_token = 0;  // tokens ending here: token_ids[first_token, + num_tokens)
    uint32_t num_tokens = 0;
  };

  // token_bytes[id] is what token `id` decodes to (raw bytes, not byte-level BPE's text).
  static absl::StatusOr<std::shared_ptr<const VocabularyTrie>> Build(
      const std::vector<std::string>& token_bytes, const std::vector<int32_t>& special_ids = {});
  // A trie over (bytes, token id) pairs, in any order (TokenMasker's suffix tries). Ids must be
  // below vocab_size.
  static std::shared_ptr<const VocabularyTrie> FromPairs(
      std::vector<std::pair<std::string, int32_t>> pairs, size_t vocab_size);

  size_t vocab_size() const { return vocab_size_; }
  size_t num_nodes() const { return nodes_.size(); }
  // Node 0 is the root (the empty prefix).
  const Node& node(uint32_t i) const { return nodes_[i]; }
  // The byte on the edge into node i (i > 0).
  uint8_t label(uint32_t i) const { return labels_[i]; }
  int32_t token_id(uint32_t i) const { return token_ids_[i]; }
  // The longest token, in bytes (the deepest node).
  size_t max_depth() const { return max_depth_; }

 private:
  VocabularyTrie() = default;
  void BuildNode(uint32_t node, const std::vector<std::pair<std::string, int32_t>>& sorted,
                 size_t lo, size_t hi, size_t depth);

  size_t vocab_size_ = 0;
  size_t max_depth_ = 0;
  std::vector<Node> nodes_;
  std::vector<uint8_t> labels_;
  std::vector<int32_t> token_ids_;
};

}  // namespace flatstate::grammar

#endif  // FLATSTATE_ENGINE_GRAMMAR_VOCAB_TRIE_H_
