#include "engine/kv/kv_block_pool.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "kernels/bf16.h"
#include "kernels/paged_attention.h"

namespace flatstate {

KvBlockPool::KvBlockPool(int num_blocks, int block_size, int num_layers, int hidden, KvDtype dtype)
    : num_blocks_(std::max(num_blocks, 0)),
      block_size_(std::max(block_size, 1)),
      num_layers_(std::max(num_layers, 0)),
      hidden_(std::max(hidden, 0)),
      dtype_(dtype) {
  const size_t floats =
      (static_cast<size_t>(num_blocks_) * bytes_per_block() + sizeof(float) - 1) / sizeof(float);
  // Deliberately not value-initialised: untouched pages stay out of the resident set.
  data_.reset(new float[floats]);
  free_.reserve(num_blocks_);
  for (int32_t b = num_blocks_ - 1; b >= 0; --b) free_.push_back(b);
  refs_.assign(num_blocks_, 0);
  cache_refs_.assign(num_blocks_, 0);
}

int KvBlockPool::refs(int32_t block) const { return Valid(block) ? refs_[block] : 0; }

bool KvBlockPool::Adjust(int32_t b, int table_delta, int cache_delta) {
  const bool cached_before = cache_refs_[b] > 0;
  const bool only_before = cached_before && refs_[b] == cache_refs_[b];
  cache_refs_[b] = std::max(cache_refs_[b] + cache_delta, 0);
  refs_[b] = std::max(refs_[b] + table_delta + cache_delta, cache_refs_[b]);
  const bool cached_after = cache_refs_[b] > 0;
  const bool only_after = cached_after && refs_[b] == cache_refs_[b];
  blocks_cached_ += static_cast<int>(cached_after) - static_cast<int>(cached_before);
  blocks_cache_only_ += static_cast<int>(only_after) - static_cast<int>(only_before);
  if (refs_[b] > 0) return false;
  free_.push_back(b);
  return true;
}

void KvBlockPool::SortFree() {
  // Keep the stack sorted (highest id at the bottom) so the lowest free ids go out first.
  std::sort(free_.begin(), free_.end(), std::greater<int32_t>());
}

size_t KvBlockPool::bytes_per_block() const {
  return KvDtypeBytes(dtype_) * 2 * static_cast<size_t>(num_layers_) * block_size_ * hidden_;
}

int64_t KvBlockPool::BlocksFor(int64_t tokens, int block_size) {
  const int64_t b = std::max(block_size, 1);
  return tokens <= 0 ? 0 : (tokens + b - 1) / b;
}

int64_t KvBlockPool::BlocksNeeded(int64_t table_blocks, int64_t tokens, int block_size) {
  return std::max<int64_t>(BlocksFor(tokens, block_size) - table_blocks, 0);
}

absl::Status KvBlockPool::Reserve(std::vector<int32_t>* table, int64_t tokens) {
  if (tokens < 0) {
    return absl::InvalidArgumentError(absl::StrCat("KV reserve for negative tokens: ", tokens));
  }
  const int64_t need =
      BlocksNeeded(static_cast<int64_t>(table->size()), tokens, block_size_);
  if (need == 0) return absl::OkStatus();
  if (need > static_cast<int64_t>(free_.size())) {
    return absl::ResourceExhaustedError(absl::StrCat("KV block pool exhausted: need ", need,
                                                     " more blocks, ", free_.size(), " free of ",
                                                     num_blocks_));
  }
  table->reserve(table->size() + need);
  for (int64_t i = 0; i < need; ++i) {
    table->push_back(free_.back());
    refs_[free_.back()] = 1;
    free_.pop_back();
  }
  return absl::OkStatus();
}

void KvBlockPool::Release(std::vector<int32_t>* table) {
  if (table->empty()) return;
  bool freed = false;
  for (int32_t b : *table) {
    if (Valid(b) && refs_[b] > cache_refs_[b]) freed |= Adjust(b, -1, 0);
  }
  table->clear();
  if (freed) SortFree();
}

void KvBlockPool::Share(std::span<const int32_t> blocks, std::vector<int32_t>* table) {
  table->reserve(table->size() + blocks.size());
  for (int32_t b : blocks) {
    if (!Valid(b) || refs_[b] == 0) continue;
    Adjust(b, +1, 0);
    table->push_back(b);
  }
}

void KvBlockPool::CacheRetain(std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    if (Valid(b) && refs_[b] > 0) Adjust(b, 0, +1);
  }
}

void KvBlockPool::CacheRelease(std::span<const int32_t> blocks) {
  bool freed = false;
  for (int32_t b : blocks) {
    if (Valid(b) && cache_refs_[b] > 0) freed |= Adjust(b, 0, -1);
  }
  if (freed) SortFree();
}

void KvBlockPool::Truncate(std::vector<int32_t>* table, size_t size) {
  if (table->size() <= size) return;
  std::vector<int32_t> tail(table->begin() + static_cast<std::ptrdiff_t>(size), table->end());
  table->resize(size);
  Release(&tail);
}

void KvBlockPool::ReadRow(int32_t block, int layer, int kv, int slot, float* out) const {
  const PagedKv p = view();
  if (dtype_ == KvDtype::kF32) {
    std::memcpy(out, p.Row(block, layer, kv, slot), sizeof(float) * hidden_);
    return;
  }
  const uint16_t* src = p.Bf16Row(block, layer, kv, slot);
  for (int d = 0; d < hidden_; ++d) out[d] = FloatFromBf16(src[d]);
}

void KvBlockPool::WriteRow(int32_t block, int layer, int kv, int slot, const float* in) {
  const PagedKv p = view();
  if (dtype_ == KvDtype::kF32) {
    std::memcpy(p.Row(block, layer, kv, slot), in, sizeof(float) * hidden_);
    return;
  }
  uint16_t* dst = p.Bf16Row(block, layer, kv, slot);
  for (int d = 0; d < hidden_; ++d) dst[d] = Bf16FromFloat(in[d]);
}

PagedKv KvBlockPool::view() const {
  return PagedKv{data_.get(), block_size_, num_layers_, hidden_, dtype_};
}

}  // namespace flatstate
