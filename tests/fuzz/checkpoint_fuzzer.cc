// Fuzzes checkpoint restore for a linear and a softmax model shape: any blob restores cleanly or
// returns an error, and a failed restore leaves the KV pool as it was. Each input is tried as it
// is and again with its last four bytes replaced by the right CRC-32C: the readers check the
// checksum before any header field, so only the second form reaches the header and payload
// parsers.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/kv/kv_block_pool.h"
#include "engine/session/checkpoint.h"
#include "engine/util/crc32c.h"
#include "engine/util/little_endian.h"

namespace {

flatstate::CheckpointModel MakeModel(flatstate::AttentionKind kind) {
  flatstate::ModelConfig c;
  c.attention_kind = kind;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 32;
  c.conv_kernel_size = kind == flatstate::AttentionKind::kSoftmax ? 0 : 4;
  return {"0123456789abcdef0123456789abcdef", c};
}

void Check(std::string_view blob) {
  static const auto linear = MakeModel(flatstate::AttentionKind::kLinearElu);
  static const auto softmax = MakeModel(flatstate::AttentionKind::kSoftmax);
  static flatstate::KvBlockPool pool(64, 16, 2, 16);
  (void)flatstate::ReadCheckpointHeader(blob);
  flatstate::SessionState a;
  (void)flatstate::RestoreSession(linear, blob, nullptr, &a);
  const int used = pool.blocks_used();
  flatstate::SessionState b;
  if (flatstate::RestoreSession(softmax, blob, &pool, &b).ok()) {
    pool.Release(&b.kv_blocks);
  } else if (pool.blocks_used() != used) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view blob(reinterpret_cast<const char*>(data), size);
  Check(blob);
  if (size >= 4) {
    std::string fixed(blob);
    flatstate::StoreLe32(flatstate::Crc32c(fixed.data(), size - 4), fixed.data() + size - 4);
    Check(fixed);
  }
  return 0;
}
