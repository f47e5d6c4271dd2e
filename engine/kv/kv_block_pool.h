// Paged KV cache for the softmax path (vLLM's PagedAttention idea): one pool of fixed-size blocks,
// a free list, and per-session block tables (std::vector<int32_t> owned by the session).
//
// A block holds `block_size` token slots for every layer: for layer l, K and V are each
// [block_size, hidden] fp32, so one block id covers a token range in all layers (the address
// formula is kernels/paged_attention.h's PagedKv::RowOffset, shared with the attention ops).
// Memory is one allocation made at construction; pages are touched only when written.
//
// The block arithmetic (how many blocks cover n tokens, how many more a table needs) lives here
// only: the engine and the server's scheduler call BlocksFor / BlocksNeeded.
//
// Not thread-safe: owned and used by the single engine loop. Failures are statuses, never crashes:
// Reserve returns ResourceExhausted (naming blocks needed/free) and leaves the table unchanged when
// the pool cannot cover the request.
#ifndef FLATSTATE_ENGINE_KV_KV_BLOCK_POOL_H_
#define FLATSTATE_ENGINE_KV_KV_BLOCK_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"

namespace flatstate {

class KvBlockPool {
 public:
  // Negative sizes are treated as 0 and block_size < 1 as 1 (a constructor cannot fail).
  KvBlockPool(int num_blocks, int block_size, int num_layers, int hidden);

  // Blocks of `block_size` (< 1 counts as 1) token slots that cover `tokens` slots:
  // ceil(tokens / block_size), 0 for tokens <= 0.
  static int64_t BlocksFor(int64_t tokens, int block_size);
  // More blocks a table of `table_blocks` blocks needs to cover `tokens` slots (0 if it does).
  static int64_t BlocksNeeded(int64_t table_blocks, int64_t tokens, int block_size);

  // Grows `table` so that it covers `tokens` token slots (BlocksFor blocks); never shrinks it.
  // InvalidArgument for tokens < 0.
  absl::Status Reserve(std::vector<int32_t>* table, int64_t tokens);
  // Returns every block of `table` to the free list and clears it. Ids outside the pool are
  // ignored; releasing the same block twice is a caller bug (it would be handed out twice).
  void Release(std::vector<int32_t>* table);
  // Returns the blocks of `table` past its first `size` to the free list (undoing a Reserve);
  // a table of `size` blocks or fewer is left as it is.
  void Truncate(std::vector<int32_t>* table, size_t size);

  // Row `slot` (0..block_size-1) of K or V for `layer` in `block`: `hidden` floats.
  float* K(int32_t block, int layer, int slot);
  float* V(int32_t block, int layer, int slot);
  const float* K(int32_t block, int layer, int slot) const;
  const float* V(int32_t block, int layer, int slot) const;

  int block_size() const { return block_size_; }
  int num_layers() const { return num_layers_; }
  int hidden() const { return hidden_; }
  int blocks_total() const { return num_blocks_; }
  int blocks_free() const { return static_cast<int>(free_.size()); }
  int blocks_used() const { return num_blocks_ - blocks_free(); }
  size_t bytes_per_block() const;
  size_t bytes_used() const { return bytes_per_block() * blocks_used(); }
  size_t bytes_total() const { return bytes_per_block() * num_blocks_; }

 private:
  size_t Offset(int32_t block, int layer, int kv, int slot) const;
  int num_blocks_, block_size_, num_layers_, hidden_;
  std::unique_ptr<float[]> data_;
  std::vector<int32_t> free_;  // stack; lowest ids handed out first
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_KV_KV_BLOCK_POOL_H_
