#include "server/store/redis/redis_session_format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/util/byte_reader.h"
#include "engine/util/crc32c.h"
#include "engine/util/little_endian.h"
#include "engine/util/status_macros.h"
#include "server/store/ids.h"

namespace flatstate::server {
namespace {

constexpr uint32_t kFormat = 1;
constexpr size_t kNonceChars = 16;

absl::Status Corrupt(absl::string_view key, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("session store key ", key, ": ", what));
}

// Prefixes a ByteReader failure with the key.
absl::Status AtKey(absl::Status s, absl::string_view key) {
  if (s.ok()) return s;
  return Corrupt(key, s.message());
}

void AppendCrc(std::string* out) { AppendLe32(Crc32c(out->data(), out->size()), out); }

// Checks the magic, the format and the trailing CRC; on success `body` is the value without its
// CRC and the reader starts after the format field.
absl::Status CheckFrame(absl::string_view value, absl::string_view magic, absl::string_view key,
                        absl::string_view* body) {
  if (value.size() < magic.size() + 4 + 4) {
    return Corrupt(key, absl::StrCat("truncated value (", value.size(), " bytes)"));
  }
  if (value.substr(0, magic.size()) != magic) return Corrupt(key, "bad magic");
  const size_t n = value.size() - 4;
  if (LoadLe32(value.data() + n) != Crc32c(value.data(), n)) {
    return Corrupt(key, "checksum mismatch (corrupt or truncated value)");
  }
  if (LoadLe32(value.data() + magic.size()) != kFormat) {
    return Corrupt(key, absl::StrCat("unknown format ", LoadLe32(value.data() + magic.size())));
  }
  *body = value.substr(0, n);
  return absl::OkStatus();
}

}  // namespace

std::string RedisKeys::SessionPrefix(absl::string_view sid) const {
  return absl::StrCat(prefix_, ":{", sid, "}:");
}
std::string RedisKeys::Version(absl::string_view sid) const {
  return absl::StrCat(SessionPrefix(sid), "ver");
}
std::string RedisKeys::Head(absl::string_view sid) const {
  return absl::StrCat(SessionPrefix(sid), "head");
}
std::string RedisKeys::Lease(absl::string_view sid) const {
  return absl::StrCat(SessionPrefix(sid), "lease");
}
std::string RedisKeys::Chunk(absl::string_view sid, int64_t c, absl::string_view nonce) const {
  return absl::StrCat(SessionPrefix(sid), "kv:", c, ":", nonce);
}
std::string RedisKeys::Checkpoint(absl::string_view cid) const {
  return absl::StrCat(prefix_, ":{", cid, "}:ckpt");
}
std::string RedisKeys::CheckpointPart(absl::string_view cid, int64_t part) const {
  return absl::StrCat(Checkpoint(cid), ":", part);
}

std::string NewNonce() { return NewId().substr(0, kNonceChars); }

std::string EncodeHead(int64_t chunk_tokens, const std::vector<std::string>& nonces,
                       absl::string_view head) {
  std::string out = "FSRH";
  out.reserve(4 + 4 + 8 + 8 + nonces.size() * kNonceChars + 8 + head.size() + 4);
  AppendLe32(kFormat, &out);
  AppendLe64(static_cast<uint64_t>(chunk_tokens), &out);
  AppendLe64(nonces.size(), &out);
  for (const std::string& n : nonces) out += n;
  AppendLe64(head.size(), &out);
  out.append(head.data(), head.size());
  AppendCrc(&out);
  return out;
}

absl::StatusOr<DecodedHead> DecodeHead(absl::string_view value, absl::string_view key) {
  absl::string_view body;
  RETURN_IF_ERROR(CheckFrame(value, "FSRH", key, &body));
  ByteReader r("session head", std::string_view(body.data(), body.size()), 8, body.size());
  DecodedHead out;
  uint64_t n = 0, len = 0;
  RETURN_IF_ERROR(AtKey(r.I64("chunk_tokens", &out.chunk_tokens), key));
  RETURN_IF_ERROR(AtKey(r.U64("total_chunks", &n), key));
  if (out.chunk_tokens < 0) return Corrupt(key, "negative chunk_tokens");
  if (n > r.remaining() / kNonceChars) return Corrupt(key, "total_chunks exceeds the value");
  out.nonces.reserve(n);
  for (uint64_t c = 0; c < n; ++c) {
    std::string_view nonce;
    RETURN_IF_ERROR(AtKey(r.Bytes("nonce", kNonceChars, &nonce), key));
    out.nonces.emplace_back(nonce);
  }
  RETURN_IF_ERROR(AtKey(r.U64("head_len", &len), key));
  std::string_view head;
  RETURN_IF_ERROR(AtKey(r.Bytes("head", len, &head), key));
  if (r.remaining() != 0) return Corrupt(key, "trailing bytes");
  out.head.assign(head.data(), head.size());
  return out;
}

std::string EncodeChunk(int64_t index, absl::string_view bytes) {
  std::string out = "FSRC";
  out.reserve(4 + 4 + 8 + 8 + bytes.size() + 4);
  AppendLe32(kFormat, &out);
  AppendLe64(static_cast<uint64_t>(index), &out);
  AppendLe64(bytes.size(), &out);
  out.append(bytes.data(), bytes.size());
  AppendCrc(&out);
  return out;
}

absl::StatusOr<std::string> DecodeChunk(absl::string_view value, int64_t index,
                                        absl::string_view key) {
  absl::string_view body;
  RETURN_IF_ERROR(CheckFrame(value, "FSRC", key, &body));
  ByteReader r("session chunk", std::string_view(body.data(), body.size()), 8, body.size());
  uint64_t stored_index = 0, len = 0;
  RETURN_IF_ERROR(AtKey(r.U64("index", &stored_index), key));
  if (stored_index != static_cast<uint64_t>(index)) {
    return Corrupt(key, absl::StrCat("holds chunk ", stored_index, ", expected ", index));
  }
  RETURN_IF_ERROR(AtKey(r.U64("len", &len), key));
  std::string_view bytes;
  RETURN_IF_ERROR(AtKey(r.Bytes("bytes", len, &bytes), key));
  if (r.remaining() != 0) return Corrupt(key, "trailing bytes");
  return std::string(bytes);
}

CheckpointManifest DescribeCheckpoint(absl::string_view blob, uint64_t part_bytes) {
  CheckpointManifest m;
  m.total_size = blob.size();
  for (uint64_t off = 0; off < blob.size(); off += part_bytes) {
    const absl::string_view part = blob.substr(off, part_bytes);
    m.parts.push_back({part.size(), Crc32c(part.data(), part.size())});
  }
  return m;
}

std::string EncodeManifest(const CheckpointManifest& m) {
  std::string out = "FSRK";
  AppendLe32(kFormat, &out);
  AppendLe64(m.total_size, &out);
  AppendLe64(m.parts.size(), &out);
  for (const CheckpointPartInfo& p : m.parts) {
    AppendLe64(p.size, &out);
    AppendLe32(p.crc, &out);
  }
  AppendCrc(&out);
  return out;
}

absl::StatusOr<CheckpointManifest> DecodeManifest(absl::string_view value, absl::string_view key) {
  absl::string_view body;
  RETURN_IF_ERROR(CheckFrame(value, "FSRK", key, &body));
  ByteReader r("checkpoint manifest", std::string_view(body.data(), body.size()), 8, body.size());
  CheckpointManifest m;
  uint64_t n = 0;
  RETURN_IF_ERROR(AtKey(r.U64("total_size", &m.total_size), key));
  RETURN_IF_ERROR(AtKey(r.U64("part_count", &n), key));
  if (n != r.remaining() / 12 || r.remaining() % 12 != 0) {
    return Corrupt(key, "part_count does not match the value");
  }
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; ++i) {
    CheckpointPartInfo p;
    RETURN_IF_ERROR(AtKey(r.U64("part_size", &p.size), key));
    RETURN_IF_ERROR(AtKey(r.U32("part_crc", &p.crc), key));
    sum += p.size;
    m.parts.push_back(p);
  }
  if (sum != m.total_size) return Corrupt(key, "part sizes do not add up to total_size");
  return m;
}

absl::Status CheckPart(absl::string_view part, const CheckpointPartInfo& info,
                       absl::string_view key) {
  if (part.size() != info.size) {
    return Corrupt(key,
                   absl::StrCat("truncated part: ", part.size(), " bytes, expected ", info.size));
  }
  if (Crc32c(part.data(), part.size()) != info.crc) return Corrupt(key, "checksum mismatch");
  return absl::OkStatus();
}

}  // namespace flatstate::server
