#include "engine/tokenizer/hf/token_index.h"

namespace flatstate::hf {

void TokenIndex::Build(const std::vector<std::string>& tokens,
                       const std::vector<uint8_t>& present) {
  tokens_ = tokens.data();
  // Hashed in one sequential pass, then inserted with each slot prefetched kAhead inserts early
  // (the slots are random cache misses).
  std::vector<std::pair<uint64_t, uint32_t>> hashed;  // (hash, id)
  hashed.reserve(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (present[id]) {
      hashed.emplace_back(Hash(tokens[id].data(), tokens[id].size()), static_cast<uint32_t>(id));
    }
  }
  const size_t n = hashed.size();
  size_t cap = 16;
  while (cap * 7 < n * 10) cap *= 2;
  slots_.assign(cap, 0);
  mask_ = cap - 1;
  repeated_ = false;
  constexpr size_t kAhead = 16;
  for (size_t k = 0; k < n; ++k) {
    if (k + kAhead < n) __builtin_prefetch(&slots_[hashed[k + kAhead].first & mask_]);
    const auto [h, id] = hashed[k];
    const uint64_t slot = (static_cast<uint64_t>(Tag(h)) << 32) | (id + 1);
    for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
      const uint64_t v = slots_[i];
      if (v == 0) {
        slots_[i] = slot;
        break;
      }
      if (static_cast<uint32_t>(v >> 32) == Tag(h) &&
          tokens_[static_cast<uint32_t>(v) - 1] == tokens_[id]) {
        slots_[i] = slot;  // a larger id for the same string
        repeated_ = true;
        break;
      }
    }
  }
}

void TokenIndex::PrefetchToken(uint64_t h) const {
  if (slots_.empty()) return;
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const uint64_t v = slots_[i];
    if (v == 0) return;
    if (static_cast<uint32_t>(v >> 32) == Tag(h)) {
      __builtin_prefetch(&tokens_[static_cast<uint32_t>(v) - 1]);
      return;
    }
  }
}

int32_t TokenIndex::FindHashed(std::string_view s, uint64_t h) const {
  if (slots_.empty()) return -1;
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const uint64_t v = slots_[i];
    if (v == 0) return -1;
    if (static_cast<uint32_t>(v >> 32) == Tag(h)) {
      const int32_t id = static_cast<int32_t>(static_cast<uint32_t>(v) - 1);
      if (tokens_[id] == s) return id;
    }
  }
}

void PairIndex::Build(const std::vector<std::pair<uint64_t, int32_t>>& pairs) {
  const size_t n = pairs.size();
  size_t cap = 16;
  int bits = 4;
  while (cap * 7 < n * 10) cap *= 2, ++bits;
  slots_.assign(cap, Entry{kEmpty, {0, 0}});
  mask_ = cap - 1;
  shift_ = 64 - bits;
  constexpr size_t kAhead = 16;  // slots are cache misses: prefetched this many inserts early
  for (size_t r = 0; r < n; ++r) {
    if (r + kAhead < n) __builtin_prefetch(&slots_[Slot(pairs[r + kAhead].first)]);
    const uint64_t key = pairs[r].first;
    const Value v{static_cast<int32_t>(r), pairs[r].second};
    for (uint64_t i = Slot(key);; i = (i + 1) & mask_) {
      Entry& e = slots_[i];
      if (e.key == kEmpty || e.key == key) {
        e = Entry{key, v};
        break;
      }
    }
  }
}

}  // namespace flatstate::hf
