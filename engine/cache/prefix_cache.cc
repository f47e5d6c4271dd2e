#include "engine/cache/prefix_cache.h"

#include <cstring>
#include <utility>

namespace flatstate {

size_t PrefixCache::KeyHash::operator()(const PrefixKey& k) const {
  size_t h;  // the key is a SHA-256 digest: any 8 of its bytes are a good hash
  std::memcpy(&h, k.data(), sizeof(h));
  return h;
}

PrefixCache::PrefixCache(size_t budget_bytes, KvBlockPool* pool)
    : budget_(budget_bytes), pool_(pool) {}

PrefixCache::~PrefixCache() {
  while (EvictOldest()) {
  }
}

const PrefixCache::Entry* PrefixCache::Find(const PrefixKey& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &*it->second;
}

void PrefixCache::InsertState(const PrefixKey& key, int64_t tokens, std::span<const float> state,
                              std::span<const int32_t> blocks) {
  if (Find(key) != nullptr) return;
  Entry e;
  e.key = key;
  e.tokens = tokens;
  e.state.assign(state.begin(), state.end());
  state_bytes_ += e.state.size() * sizeof(float);
  if (pool_ != nullptr && !blocks.empty()) {
    e.blocks.assign(blocks.begin(), blocks.end());
    pool_->CacheRetain(e.blocks);
  }
  Insert(std::move(e));
}

void PrefixCache::InsertBlocks(const PrefixKey& key, int64_t tokens,
                               std::span<const int32_t> blocks) {
  if (pool_ == nullptr || Find(key) != nullptr) return;
  Entry e;
  e.key = key;
  e.tokens = tokens;
  e.blocks.assign(blocks.begin(), blocks.end());
  pool_->CacheRetain(e.blocks);
  Insert(std::move(e));
}

void PrefixCache::Insert(Entry e) {
  lru_.push_front(std::move(e));
  index_[lru_.front().key] = lru_.begin();
  ++counts_.insertions;
  while (bytes() > budget_ && EvictOldest()) {
  }
}

void PrefixCache::Drop(std::list<Entry>::iterator it) {
  state_bytes_ -= it->state.size() * sizeof(float);
  if (pool_ != nullptr) pool_->CacheRelease(it->blocks);
  index_.erase(it->key);
  lru_.erase(it);
  ++counts_.evictions;
}

bool PrefixCache::EvictOldest() {
  if (lru_.empty()) return false;
  Drop(std::prev(lru_.end()));
  return true;
}

void PrefixCache::CountLookup(bool hit, int64_t tokens_saved) {
  ++counts_.lookups;
  if (hit) {
    ++counts_.hits;
    counts_.tokens_saved += static_cast<uint64_t>(tokens_saved);
  } else {
    ++counts_.misses;
  }
}

size_t PrefixCache::bytes() const {
  if (pool_ == nullptr) return state_bytes_;
  return state_bytes_ + static_cast<size_t>(pool_->blocks_cached()) * pool_->bytes_per_block();
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = counts_;
  s.bytes = bytes();
  s.entries = lru_.size();
  s.budget = budget_;
  return s;
}

}  // namespace flatstate
