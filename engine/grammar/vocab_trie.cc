#include "engine/grammar/vocab_trie.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flatstate::grammar {

absl::StatusOr<std::shared_ptr<const VocabularyTrie>> VocabularyTrie::Build(
    const std::vector<std::string>& token_bytes, const std::vector<int32_t>& special_ids) {
  std::vector<bool> special(token_bytes.size(), false);
  for (int32_t id : special_ids) {
    if (id < 0 || static_cast<size_t>(id) >= token_bytes.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vocabulary trie: special id ", id, " outside the vocabulary of ", token_bytes.size()));
    }
    special[static_cast<size_t>(id)] = true;
  }
  std::vector<std::pair<std::string, int32_t>> pairs;
  pairs.reserve(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (!special[id] && !token_bytes[id].empty()) {
      pairs.emplace_back(token_bytes[id], static_cast<int32_t>(id));
    }
  }
  return FromPairs(std::move(pairs), token_bytes.size());
}

std::shared_ptr<const VocabularyTrie> VocabularyTrie::FromPairs(
    std::vector<std::pair<std::string, int32_t>> pairs, size_t vocab_size) {
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  std::shared_ptr<VocabularyTrie> trie(new VocabularyTrie());
  trie->vocab_size_ = vocab_size;
  trie->nodes_.emplace_back();
  trie->labels_.push_back(0);
  trie->token_ids_.reserve(pairs.size());
  trie->BuildNode(0, pairs, 0, pairs.size(), 0);
  return trie;
}

// sorted[lo, hi) share their first `depth` bytes, which lead to `node`.
void VocabularyTrie::BuildNode(uint32_t node,
                               const std::vector<std::pair<std::string, int32_t>>& sorted,
                               size_t lo, size_t hi, size_t depth) {
  max_depth_ = std::max(max_depth_, depth);
  auto text = [&](size_t i) -> const std::string& { return sorted[i].first; };
  nodes_[node].first_token = static_cast<uint32_t>(token_ids_.size());
  size_t i = lo;
  while (i < hi && text(i).size() == depth) token_ids_.push_back(sorted[i++].second);
  nodes_[node].num_tokens = static_cast<uint32_t>(token_ids_.size()) - nodes_[node].first_token;
  // Group the rest by their byte at `depth`; each group is one child.
  std::vector<std::pair<size_t, size_t>> groups;
  while (i < hi) {
    const char b = text(i)[depth];
    size_t j = i + 1;
    while (j < hi && text(j)[depth] == b) ++j;
    groups.push_back({i, j});
    i = j;
  }
  const uint32_t first = static_cast<uint32_t>(nodes_.size());
  nodes_[node].first_child = first;
  nodes_[node].num_children = static_cast<uint32_t>(groups.size());
  for (const auto& [a, b] : groups) {
    nodes_.emplace_back();
    labels_.push_back(static_cast<uint8_t>(text(a)[depth]));
  }
  for (size_t k = 0; k < groups.size(); ++k) {
    BuildNode(first + static_cast<uint32_t>(k), sorted, groups[k].first, groups[k].second,
              depth + 1);
  }
}

}  // namespace flatstate::grammar
