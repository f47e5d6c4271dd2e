#include "engine/grammar/token_masker.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/grammar/trie_walk.h"

namespace flatstate::grammar {

struct TokenMasker::KeyMask {
  std::vector<uint64_t> accepted;              // decided within the key, whatever lies below
  std::shared_ptr<const VocabularyTrie> rest;  // the bytes after the pop, of the other tokens
  size_t max_seen = 0;                         // the deepest stack of the walk, with kBottom
};

namespace {

// (suffix, token) for every token at or below `node`, the suffix being the bytes past `node`.
void CollectSubtree(const VocabularyTrie& trie, uint32_t node, std::string* suffix,
                    std::vector<std::pair<std::string, int32_t>>* out) {
  const VocabularyTrie::Node& n = trie.node(node);
  for (uint32_t t = n.first_token; t < n.first_token + n.num_tokens; ++t) {
    out->emplace_back(*suffix, trie.token_id(t));
  }
  for (uint32_t c = n.first_child; c < n.first_child + n.num_children; ++c) {
    suffix->push_back(static_cast<char>(trie.label(c)));
    CollectSubtree(trie, c, suffix, out);
    suffix->pop_back();
  }
}

absl::Status OtherGrammar() {
  return absl::InvalidArgumentError("token masker: the state belongs to another grammar");
}

}  // namespace

size_t TokenMask::CountAllowed() const {
  size_t n = 0;
  for (uint64_t w : words_) n += static_cast<size_t>(std::popcount(w));
  return n;
}

void ApplyTokenMask(const TokenMask& mask, std::span<float> logits) {
  const float kMinusInf = -std::numeric_limits<float>::infinity();
  for (size_t id = 0; id < logits.size(); ++id) {
    if (id >= mask.size() || !mask.allowed(static_cast<int32_t>(id))) logits[id] = kMinusInf;
  }
}

TokenMasker::TokenMasker(std::shared_ptr<const CompiledGrammar> grammar,
                         std::shared_ptr<const VocabularyTrie> trie,
                         const TokenMaskerOptions& options)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), options_(options) {
  options_.key_frames = std::max<uint32_t>(options_.key_frames, 1);
}

absl::Status TokenMasker::Walk(const GrammarState& state, TokenMask* mask) const {
  if (&state.grammar() != grammar_.get()) return OtherGrammar();
  mask->Reset(trie_->vocab_size());
  TrieWalk walk(*grammar_, *trie_, state.limits());
  return walk.Run(state.stacks(), state.cursor(), mask);
}

absl::StatusOr<std::shared_ptr<const TokenMasker::KeyMask>> TokenMasker::GetKeyMask(
    std::span<const uint32_t> key, const Utf8Cursor& cursor, const GrammarLimits& limits) const {
  std::string id;
  id.push_back(static_cast<char>(cursor.lead));
  id.push_back(static_cast<char>(cursor.need));
  id.append(reinterpret_cast<const char*>(&cursor.value), sizeof(cursor.value));
  id.append(reinterpret_cast<const char*>(&limits.max_depth), sizeof(limits.max_depth));
  id.append(reinterpret_cast<const char*>(key.data()), key.size() * sizeof(uint32_t));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = keys_.find(id); it != keys_.end()) return it->second;
  }
  // Walk the key alone, on top of kBottom (one more entry of depth for it).
  GrammarLimits cut = limits;
  cut.max_depth = limits.max_depth + 1;
  std::vector<uint32_t> stack = {kBottom};
  stack.insert(stack.end(), key.begin(), key.end());
  StackSet start;
  start.Add(stack, cut.max_stacks);
  TokenMask accepted(trie_->vocab_size());
  std::vector<std::pair<uint32_t, uint32_t>> bottoms;
  TrieWalk walk(*grammar_, *trie_, cut);
  if (absl::Status s = walk.Run(start, cursor, &accepted, &bottoms); !s.ok()) return s;
  auto km = std::make_shared<KeyMask>();
  km->accepted = std::move(accepted.mutable_words());
  km->max_seen = std::max(walk.stepper().max_seen(), stack.size());
  if (!bottoms.empty()) {
    std::vector<std::pair<std::string, int32_t>> rest;
    std::string suffix;
    for (const auto& [node, depth] : bottoms) CollectSubtree(*trie_, node, &suffix, &rest);
    km->rest = VocabularyTrie::FromPairs(std::move(rest), trie_->vocab_size());
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++keys_built_;
  if (keys_.size() >= options_.cache_entries) keys_.clear();
  keys_.emplace(std::move(id), km);
  return std::shared_ptr<const KeyMask>(std::move(km));
}

absl::Status TokenMasker::FastMask(const GrammarState& state, TokenMask* mask) const {
  mask->Reset(trie_->vocab_size());
  const GrammarLimits& limits = state.limits();
  StackStepper stepper(*grammar_, limits);
  StackSet below;
  auto& words = mask->mutable_words();
  for (size_t i = 0; i < state.stacks().size(); ++i) {
    const auto s = state.stacks().stack(i);
    if (s.empty()) continue;
    const size_t k = std::min<size_t>(options_.key_frames, s.size());
    const auto context = s.first(s.size() - k);
    absl::StatusOr<std::shared_ptr<const KeyMask>> km =
        GetKeyMask(s.last(k), state.cursor(), limits);
    if (!km.ok()) return km.status();
    if (context.size() + (*km)->max_seen - 1 > limits.max_depth) {
      // Near the depth limit the cut walk is not exact: walk this stack whole.
      StackSet one;
      one.Add(s, limits.max_stacks);
      TrieWalk walk(*grammar_, *trie_, limits);
      if (absl::Status st = walk.Run(one, state.cursor(), mask); !st.ok()) return st;
      continue;
    }
    for (size_t w = 0; w < words.size(); ++w) words[w] |= (*km)->accepted[w];
    const VocabularyTrie* rest = (*km)->rest.get();
    if (rest == nullptr) continue;
    if (absl::Status st = stepper.Resume(context, &below); !st.ok()) return st;
    if (below.empty()) continue;
    const VocabularyTrie::Node& root = rest->node(0);
    for (uint32_t t = root.first_token; t < root.first_token + root.num_tokens; ++t) {
      mask->Allow(rest->token_id(t));
    }
    TrieWalk walk(*grammar_, *rest, limits);
    if (absl::Status st = walk.Run(below, Utf8Cursor{}, mask); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status TokenMasker::AddEos(const GrammarState& state, const std::vector<int32_t>& eos_ids,
                                 TokenMask* mask) const {
  for (int32_t id : eos_ids) {
    if (id < 0 || static_cast<size_t>(id) >= mask->size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token masker: EOS id ", id, " outside the vocabulary of ", mask->size()));
    }
    if (state.IsComplete()) mask->Allow(id);
  }
  return absl::OkStatus();
}

absl::Status TokenMasker::ComputeMaskUncached(const GrammarState& state,
                                              const std::vector<int32_t>& eos_ids,
                                              TokenMask* mask) const {
  if (absl::Status s = Walk(state, mask); !s.ok()) return s;
  return AddEos(state, eos_ids, mask);
}

absl::Status TokenMasker::ComputeMask(const GrammarState& state,
                                      const std::vector<int32_t>& eos_ids, TokenMask* mask) const {
  if (&state.grammar() != grammar_.get()) return OtherGrammar();
  std::string key;
  if (options_.cache_states) {
    key = state.Key();  // and the limits, which can cut masks short
    key.append(reinterpret_cast<const char*>(&state.limits().max_depth), sizeof(uint32_t));
    key.append(reinterpret_cast<const char*>(&state.limits().max_stacks), sizeof(uint32_t));
    std::shared_ptr<const std::vector<uint64_t>> cached;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = states_.find(key); it != states_.end()) {
        cached = it->second;
        ++hits_;
      } else {
        ++misses_;
      }
    }
    if (cached != nullptr) {
      mask->Reset(trie_->vocab_size());
      mask->mutable_words() = *cached;
      return AddEos(state, eos_ids, mask);
    }
  }
  if (absl::Status s = FastMask(state, mask); !s.ok()) return s;
  if (options_.cache_states) {
    auto words = std::make_shared<const std::vector<uint64_t>>(mask->words());
    std::lock_guard<std::mutex> lock(mu_);
    if (states_.size() >= options_.cache_entries) states_.clear();
    states_.emplace(std::move(key), std::move(words));
  }
  return AddEos(state, eos_ids, mask);
}

size_t TokenMasker::cache_hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

size_t TokenMasker::cache_misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

size_t TokenMasker::keys_built() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_built_;
}

}  // namespace flatstate::grammar
