// Fuzzes the Redis session store's record decoders (server/store/redis/redis_session_format.h):
// values another replica wrote are untrusted bytes. Any input decodes to a record that encodes back
// to exactly the input, or gives DataLoss; never a crash, a hang or a huge allocation.
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "server/store/redis/redis_session_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flatstate::server;
  const absl::string_view v(reinterpret_cast<const char*>(data), size);
  if (auto h = DecodeHead(v, "fuzz:head"); h.ok()) {
    if (EncodeHead(h->chunk_tokens, h->nonces, h->head) != v) __builtin_trap();
  } else if (h.status().code() != absl::StatusCode::kDataLoss) {
    __builtin_trap();
  }
  const int64_t index = size > 0 ? data[0] % 4 : 0;
  if (auto c = DecodeChunk(v, index, "fuzz:chunk"); c.ok()) {
    if (EncodeChunk(index, *c) != v) __builtin_trap();
  } else if (c.status().code() != absl::StatusCode::kDataLoss) {
    __builtin_trap();
  }
  if (auto m = DecodeManifest(v, "fuzz:manifest"); m.ok()) {
    if (EncodeManifest(*m) != v) __builtin_trap();
  } else if (m.status().code() != absl::StatusCode::kDataLoss) {
    __builtin_trap();
  }
  return 0;
}
