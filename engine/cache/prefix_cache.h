// PrefixCache: snapshots of session state at chunk-grid points of prompts, keyed by PrefixKey
// (prefix_key.h), least recently used first out, bounded by a byte budget. The engine
// (Engine::AppendPrompt and Engine::Step) fills it and restores from it; see engine.h,
// "Prefix cache", for when a snapshot is taken and why it gives the same bits as no cache.
//
// An entry is a linear kind's whole recurrent state (constant size: the model's state_floats),
// or, for softmax, references to the KV blocks of the prefix in the engine's KvBlockPool (shared
// with the sessions that use them; a block goes back to the pool when its last reference goes),
// or both for a model with state and softmax layers (layer_types).
//
// Bytes held: the sum of the entries' states plus the distinct KV blocks the cache references
// times the block's bytes (a block shared by several entries counts once, whether or
// not a session also uses it). After every insertion the least recently used entries are dropped
// until bytes() <= budget; an entry larger than the whole budget is therefore never kept.
//
// Owns its entries (and their block references; the destructor drops them: the pool must outlive
// the cache). Not thread-safe (the engine's thread). Never fails.
#ifndef FLATSTATE_ENGINE_CACHE_PREFIX_CACHE_H_
#define FLATSTATE_ENGINE_CACHE_PREFIX_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/cache/prefix_key.h"
#include "engine/kv/kv_block_pool.h"

namespace flatstate {

// Cumulative counts since the cache was made, and what it holds now.
struct PrefixCacheStats {
  uint64_t lookups = 0;       // prompts that had at least one grid point to look up
  uint64_t hits = 0;          // of those, restored from an entry
  uint64_t misses = 0;        // of those, found none
  uint64_t tokens_saved = 0;  // prompt tokens restored instead of prefilled
  uint64_t insertions = 0;
  uint64_t evictions = 0;  // entries dropped for the budget or for KV blocks
  size_t bytes = 0;        // held now (see the top of the file)
  size_t entries = 0;
  size_t budget = 0;

  // Adds every field of `o` (the server sums its models' caches).
  PrefixCacheStats& operator+=(const PrefixCacheStats& o) {
    lookups += o.lookups;
    hits += o.hits;
    misses += o.misses;
    tokens_saved += o.tokens_saved;
    insertions += o.insertions;
    evictions += o.evictions;
    bytes += o.bytes;
    entries += o.entries;
    budget += o.budget;
    return *this;
  }
};

class PrefixCache {
 public:
  struct Entry {
    PrefixKey key{};
    int64_t tokens = 0;           // length of the prefix
    std::vector<float> state;     // linear kinds: the recurrent state after `tokens` tokens
    std::vector<int32_t> blocks;  // softmax: the KV blocks of tokens [0, tokens)
  };

  // `pool`: the softmax engine's KV pool, whose blocks InsertBlocks entries reference; null for
  // linear kinds. `budget_bytes` > 0.
  PrefixCache(size_t budget_bytes, KvBlockPool* pool);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The entry for `key`, now the most recently used; null when there is none. The pointer is
  // valid until the next insertion or eviction.
  const Entry* Find(const PrefixKey& key);
  // Keeps `state` as the snapshot of the `tokens`-token prefix named `key` (an existing entry of
  // that key is only marked used), then drops entries to fit the budget. A model with both state
  // and softmax layers also passes the prefix's KV `blocks` (referenced as InsertBlocks does).
  void InsertState(const PrefixKey& key, int64_t tokens, std::span<const float> state,
                   std::span<const int32_t> blocks = {});
  // The same for softmax: the entry takes a reference to each of `blocks` (in the pool).
  void InsertBlocks(const PrefixKey& key, int64_t tokens, std::span<const int32_t> blocks);
  // Drops the least recently used entry; false when the cache is empty.
  bool EvictOldest();
  // Counts one lookup: a hit restoring `tokens_saved` tokens, or a miss.
  void CountLookup(bool hit, int64_t tokens_saved);

  size_t bytes() const;
  size_t budget() const { return budget_; }
  size_t entries() const { return lru_.size(); }
  PrefixCacheStats stats() const;

 private:
  struct KeyHash {
    size_t operator()(const PrefixKey& k) const;
  };
  // Moves a new entry to the front, indexes it, and enforces the budget.
  void Insert(Entry e);
  void Drop(std::list<Entry>::iterator it);

  const size_t budget_;
  KvBlockPool* const pool_;
  std::list<Entry> lru_;  // most recently used first
  absl::flat_hash_map<PrefixKey, std::list<Entry>::iterator, KeyHash> index_;
  size_t state_bytes_ = 0;  // linear: sum of the entries' states
  PrefixCacheStats counts_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_CACHE_PREFIX_CACHE_H_
