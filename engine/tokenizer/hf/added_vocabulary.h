// The added tokens of a Hugging Face tokenizer.json ("added_tokens"): tokens matched in the text
// before the model sees it, as upstream added_vocabulary.rs does. Tokens with "normalized": false
// are matched on the raw input; those with "normalized": true on each normalized piece (their
// content normalized the same way). Matching is leftmost-longest, non-overlapping; "single_word",
// "lstrip" and "rstrip" are honoured; special tokens are skipped (left as plain text) unless
// parse_special is set.
//
// Owns the token list and two byte tries. Immutable after construction and thread-safe. Build
// fails with InvalidArgument naming "added_tokens[i]" and the field; Split never fails.
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_ADDED_VOCABULARY_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_ADDED_VOCABULARY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/hf/normalizer.h"
#include "nlohmann/json.hpp"

namespace flatstate::hf {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// One piece of a split: either an added token (id >= 0) or text [start, end) of the input.
struct AddedSplit {
  int32_t id;
  size_t start, end;
};

class AddedVocabulary {
 public:
  // `normalizer` (may be null) normalizes the content of "normalized" tokens.
  static absl::StatusOr<std::unique_ptr<AddedVocabulary>> FromJson(const nlohmann::json& j,
                                                                   const std::string& where,
                                                                   const Normalizer* normalizer);
  // Splits `text` by the raw (normalized == false) or normalized tries.
  void Split(std::string_view text, bool normalized_trie, bool parse_special,
             std::vector<AddedSplit>* out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  // nullptr when `id` is not an added token.
  const AddedToken* Find(int32_t id) const;
  int32_t IdOf(std::string_view content) const;  // -1 when absent
  bool has_normalized() const { return !tries_[1].nodes.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into tokens_
  };
  struct Trie {
    std::vector<Node> nodes;  // nodes[0] is the root when non-empty
    bool first_byte[256] = {};
    void Add(std::string_view key, int32_t token);
    // Longest match starting at text[i]: its end and token index, or token -1.
    int32_t Longest(std::string_view text, size_t i, size_t* end) const;
  };

  AddedVocabulary() = default;
  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<int32_t, int32_t> by_id_;
  absl::flat_hash_map<std::string, int32_t> by_content_;
  Trie tries_[2];  // raw, normalized
};

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_ADDED_VOCABULARY_H_
