// Paged KV cache for the softmax path (vLLM's PagedAttention idea): one pool of fixed-size blocks,
// a free list, and per-session block tables (std::vector<int32_t> owned by the session).
//
// A block holds `block_size` token slots for every layer: for layer l, K and V are each
// [block_size, hidden] elements of the pool's KvDtype (fp32, or bf16 with --kv_dtype bf16), so
// one block id covers a token range in all layers (the address formula is kernels/
// paged_attention.h's PagedKv::RowOffset, shared with the attention ops).
// Memory is one allocation made at construction; pages are touched only when written.
//
// The block arithmetic (how many blocks cover n tokens, how many more a table needs) lives here
// only: the engine and the server's scheduler call BlocksFor / BlocksNeeded.
//
// Blocks are reference-counted so that sessions and the prefix cache (engine/cache/
// prefix_cache.h) can share the blocks of a common prefix (vLLM's automatic prefix caching):
// Reserve hands out blocks with one reference, Share adds a session's reference to blocks it did
// not write, CacheRetain / CacheRelease the cache's own, and a block goes back to the free list
// when its last reference goes. Sharing is only ever of full blocks of tokens before the sharer's
// position, which no owner writes again, so copy-on-write never has to copy (docs/http-api.md,
// "Prefix cache").
//
// Not thread-safe: owned and used by the single engine loop. Failures are statuses, never crashes:
// Reserve returns ResourceExhausted (naming blocks needed/free) and leaves the table unchanged when
// the pool cannot cover the request.
#ifndef FLATSTATE_ENGINE_KV_KV_BLOCK_POOL_H_
#define FLATSTATE_ENGINE_KV_KV_BLOCK_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/paged_attention.h"

namespace flatstate {

class KvBlockPool {
 public:
  // Negative sizes are treated as 0 and block_size < 1 as 1 (a constructor cannot fail).
  KvBlockPool(int num_blocks, int block_size, int num_layers, int hidden,
              KvDtype dtype = KvDtype::kF32);

  // Blocks of `block_size` (< 1 counts as 1) token slots that cover `tokens` slots:
  // ceil(tokens / block_size), 0 for tokens <= 0.
  static int64_t BlocksFor(int64_t tokens, int block_size);
  // More blocks a table of `table_blocks` blocks needs to cover `tokens` slots (0 if it does).
  static int64_t BlocksNeeded(int64_t table_blocks, int64_t tokens, int block_size);

  // Grows `table` so that it covers `tokens` token slots (BlocksFor blocks); never shrinks it.
  // InvalidArgument for tokens < 0.
  absl::Status Reserve(std::vector<int32_t>* table, int64_t tokens);
  // Drops the table's reference to each of its blocks (a block with no reference left goes back
  // to the free list) and clears it. Ids outside the pool and blocks with no reference are
  // ignored.
  void Release(std::vector<int32_t>* table);
  // Appends `blocks` (ids in the pool, each with a reference) to `table`, adding a reference to
  // each: the table now shares them. The caller must not write them (see the top of the file).
  void Share(std::span<const int32_t> blocks, std::vector<int32_t>* table);
  // The prefix cache's references: CacheRetain adds one to each block, CacheRelease drops one
  // (a block with no reference left goes back to the free list). Invalid ids are ignored.
  void CacheRetain(std::span<const int32_t> blocks);
  void CacheRelease(std::span<const int32_t> blocks);
  // Returns the blocks of `table` past its first `size` to the free list (undoing a Reserve);
  // a table of `size` blocks or fewer is left as it is.
  void Truncate(std::vector<int32_t>* table, size_t size);

  // Row `slot` (0..block_size-1) of K (kv = 0) or V (kv = 1) for `layer` in `block`, as
  // `hidden` floats: ReadRow widens (exact), WriteRow rounds to the pool's dtype (nearest-even
  // bf16) — the same rounding as the attention op's K/V write.
  void ReadRow(int32_t block, int layer, int kv, int slot, float* out) const;
  void WriteRow(int32_t block, int layer, int kv, int slot, const float* in);
  // The pool's memory as the attention ops address it.
  PagedKv view() const;
  void* data() { return data_.get(); }
  KvDtype dtype() const { return dtype_; }

  int block_size() const { return block_size_; }
  int num_layers() const { return num_layers_; }
  int hidden() const { return hidden_; }
  int blocks_total() const { return num_blocks_; }
  int blocks_free() const { return static_cast<int>(free_.size()); }
  int blocks_used() const { return num_blocks_ - blocks_free(); }
  // Blocks the prefix cache holds a reference to, and those of them only the cache holds (what
  // dropping every cache entry would free).
  int blocks_cached() const { return blocks_cached_; }
  int blocks_cache_only() const { return blocks_cache_only_; }
  // References to `block` (sessions' and the cache's); 0 for a free block or an invalid id.
  int refs(int32_t block) const;
  size_t bytes_per_block() const;  // 2 * layers * block_size * hidden * KvDtypeBytes(dtype)
  size_t bytes_used() const { return bytes_per_block() * blocks_used(); }
  size_t bytes_total() const { return bytes_per_block() * num_blocks_; }

 private:
  bool Valid(int32_t b) const { return b >= 0 && b < num_blocks_; }
  // Adds `table_delta` table references and `cache_delta` cache references to block `b` (refs
  // never go below 0), keeps the cache counters, and frees the block when its refs reach 0.
  // Returns true when it was freed.
  bool Adjust(int32_t b, int table_delta, int cache_delta);
  void SortFree();

  int num_blocks_, block_size_, num_layers_, hidden_;
  KvDtype dtype_;
  std::unique_ptr<float[]> data_;    // bytes_total() bytes (float-aligned)
  std::vector<int32_t> free_;        // stack; lowest ids handed out first
  std::vector<int32_t> refs_;        // per block: every reference (tables and cache)
  std::vector<int32_t> cache_refs_;  // per block: the prefix cache's references
  int blocks_cached_ = 0, blocks_cache_only_ = 0;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_KV_KV_BLOCK_POOL_H_
