// The key names and value framing of RedisSessionStore (redis_session_store.h has the layout).
//
// Every value the store writes is framed: a magic, a format version, its fields, and a CRC-32C
// (engine/util/crc32c.h) of everything before it, so a truncated, corrupted or misplaced value is
// detected on read. All integers are little-endian.
//
//   head   "FSRH" u32 format=1 | i64 chunk_tokens | u64 total_chunks |
//          total_chunks x 16 lower-case hex characters (the nonce of chunk c's key) |
//          u64 head_len | head bytes | u32 crc
//          (the Lua scripts read total_chunks at bytes [16, 24) and the nonces from byte 24 to
//          name the chunk keys server-side: keep those offsets)
//   chunk  "FSRC" u32 format=1 | u64 chunk index | u64 len | bytes | u32 crc
//   named checkpoint manifest
//          "FSRK" u32 format=1 | u64 total size | u64 part count | part count x (u64 size,
//          u32 crc of the part) | u32 crc  (the parts themselves are raw bytes)
//
// Stateless functions; thread-safe. Decoders never crash on any input: a value that does not
// parse is DataLoss "session store key <key>: <what is wrong>".
#ifndef FLATSTATE_SERVER_STORE_REDIS_REDIS_SESSION_FORMAT_H_
#define FLATSTATE_SERVER_STORE_REDIS_REDIS_SESSION_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flatstate::server {

// Key names: "<prefix>:{<id>}:..." (see redis_session_store.h).
class RedisKeys {
 public:
  explicit RedisKeys(std::string prefix) : prefix_(std::move(prefix)) {}
  const std::string& prefix() const { return prefix_; }
  // "<prefix>:{<sid>}:" : every key of the session starts with it.
  std::string SessionPrefix(absl::string_view sid) const;
  std::string Version(absl::string_view sid) const;
  std::string Head(absl::string_view sid) const;
  std::string Lease(absl::string_view sid) const;
  std::string Chunk(absl::string_view sid, int64_t c, absl::string_view nonce) const;
  std::string Checkpoint(absl::string_view cid) const;
  std::string CheckpointPart(absl::string_view cid, int64_t part) const;

 private:
  std::string prefix_;
};

// 16 random lower-case hex characters (64 bits from NewId's source).
std::string NewNonce();

struct DecodedHead {
  int64_t chunk_tokens = 0;
  std::vector<std::string> nonces;  // one per chunk
  std::string head;
};

std::string EncodeHead(int64_t chunk_tokens, const std::vector<std::string>& nonces,
                       absl::string_view head);
absl::StatusOr<DecodedHead> DecodeHead(absl::string_view value, absl::string_view key);

std::string EncodeChunk(int64_t index, absl::string_view bytes);
// The bytes of a chunk value; DataLoss also when it holds another chunk index than `index`.
absl::StatusOr<std::string> DecodeChunk(absl::string_view value, int64_t index,
                                        absl::string_view key);

struct CheckpointPartInfo {
  uint64_t size = 0;
  uint32_t crc = 0;
};
struct CheckpointManifest {
  uint64_t total_size = 0;
  std::vector<CheckpointPartInfo> parts;
};
// Splits nothing: describes `blob` cut into parts of `part_bytes`.
CheckpointManifest DescribeCheckpoint(absl::string_view blob, uint64_t part_bytes);
std::string EncodeManifest(const CheckpointManifest& m);
absl::StatusOr<CheckpointManifest> DecodeManifest(absl::string_view value, absl::string_view key);
// Checks one part against its manifest entry.
absl::Status CheckPart(absl::string_view part, const CheckpointPartInfo& info,
                       absl::string_view key);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_STORE_REDIS_REDIS_SESSION_FORMAT_H_
