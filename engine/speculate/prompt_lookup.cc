#include "engine/speculate/prompt_lookup.h"

#include <algorithm>
#include <memory>

namespace flatstate {

PromptLookupDrafter::PromptLookupDrafter(const PromptLookupOptions& options)
    : o_(options), pacer_(options.max_draft) {
  o_.min_ngram = std::clamp(o_.min_ngram, 1, 16);
  o_.max_ngram = std::clamp(o_.max_ngram, o_.min_ngram, 16);
  last_end_.resize(static_cast<size_t>(o_.max_ngram - o_.min_ngram + 1));
}

uint64_t PromptLookupDrafter::Hash(int64_t end, int n) const {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(n);
  for (int64_t i = end - n; i < end; ++i) {
    h ^= static_cast<uint32_t>(tokens_[static_cast<size_t>(i)]);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h;
}

void PromptLookupDrafter::Index(int64_t end) {
  for (int n = o_.min_ngram; n <= o_.max_ngram && n <= end; ++n) {
    last_end_[static_cast<size_t>(n - o_.min_ngram)][Hash(end, n)] = end;
  }
}

void PromptLookupDrafter::Append(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) {
    // The n-grams ending at the old end get a continuation now: index them. The current suffix
    // itself stays out of the index, so a lookup finds an earlier occurrence.
    if (!tokens_.empty()) Index(size());
    tokens_.push_back(t);
  }
}

std::vector<int32_t> PromptLookupDrafter::Draft(int limit, std::span<const double> cost) {
  const int64_t k = pacer_.Next(limit, cost);
  if (k < 1) return {};
  const int64_t L = size();
  for (int n = o_.max_ngram; n >= o_.min_ngram; --n) {
    if (L <= n) continue;
    const auto& index = last_end_[static_cast<size_t>(n - o_.min_ngram)];
    auto it = index.find(Hash(L, n));
    if (it == index.end()) continue;
    const int64_t e = it->second;
    // A hash collision is possible: check the tokens.
    if (!std::equal(tokens_.begin() + (e - n), tokens_.begin() + e, tokens_.begin() + (L - n))) {
      continue;
    }
    const int64_t take = std::min(k, L - e);
    return std::vector<int32_t>(tokens_.begin() + e, tokens_.begin() + e + take);
  }
  return {};
}

void PromptLookupDrafter::Feedback(int drafted, int accepted) {
  pacer_.Feedback(drafted, accepted);
}

std::unique_ptr<Drafter> PromptLookupDrafter::Clone() {
  return std::make_unique<PromptLookupDrafter>(*this);
}

}  // namespace flatstate
