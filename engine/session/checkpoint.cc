// Checkpoint blob layout: docs/checkpoint-format.md. All integers and floats are little-endian.
#include "engine/session/checkpoint.h"

#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/util/crc32c.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

constexpr char kMagic[8] = {'F', 'S', 'C', 'K', 'P', 'T', '\0', '\1'};
constexpr size_t kPrefixBytes = 16;  // magic, u32 version, u32 header length
constexpr size_t kCrcBytes = 4;
constexpr size_t kMinBytes = kPrefixBytes + kCrcBytes;
constexpr uint32_t kMaxTextTail = 3;  // bytes of one incomplete UTF-8 character
constexpr int kMaxKind = static_cast<int>(AttentionKind::kFavor);

// ---- encoding ----

// Debian's abseil has its own string_view, so StrCat takes no std::string_view: convert here.
std::string KindName(AttentionKind kind) { return std::string(AttentionKindName(kind)); }

class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
    out_->append(b, 4);
  }
  void U64(uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
    out_->append(b, 8);
  }
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F32(float v) { U32(std::bit_cast<uint32_t>(v)); }
  void Bytes(std::string_view s) { out_->append(s.data(), s.size()); }
  void Floats(const float* p, size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
      out_->append(reinterpret_cast<const char*>(p), n * sizeof(float));
    } else {
      for (size_t i = 0; i < n; ++i) F32(p[i]);
    }
  }
  void PatchU32(size_t offset, uint32_t v) {
    for (int i = 0; i < 4; ++i) (*out_)[offset + i] = static_cast<char>(v >> (8 * i));
  }

 private:
  std::string* out_;
};

uint32_t LoadU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

uint64_t LoadU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

void LoadFloats(const char* src, size_t n, float* dst) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(LoadU32(src + 4 * i));
  }
}

// ---- decoding: every read is bounds-checked and names its field ----

class Reader {
 public:
  // Reads bytes [begin, end) of `data`.
  Reader(std::string_view data, size_t begin, size_t end) : data_(data), pos_(begin), end_(end) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return end_ - pos_; }

  absl::Status Need(size_t n, const char* field) const {
    if (n > remaining()) {
      return absl::DataLossError(absl::StrCat("truncated checkpoint: field ", field, " at offset ",
                                              pos_, " needs ", n, " bytes, ", remaining(),
                                              " left"));
    }
    return absl::OkStatus();
  }
  absl::Status U8(const char* field, uint8_t* v) {
    RETURN_IF_ERROR(Need(1, field));
    *v = static_cast<uint8_t>(data_[pos_++]);
    return absl::OkStatus();
  }
  absl::Status U32(const char* field, uint32_t* v) {
    RETURN_IF_ERROR(Need(4, field));
    *v = LoadU32(data_.data() + pos_);
    pos_ += 4;
    return absl::OkStatus();
  }
  absl::Status U64(const char* field, uint64_t* v) {
    RETURN_IF_ERROR(Need(8, field));
    *v = LoadU64(data_.data() + pos_);
    pos_ += 8;
    return absl::OkStatus();
  }
  absl::Status I32(const char* field, int32_t* v) {
    uint32_t u = 0;
    RETURN_IF_ERROR(U32(field, &u));
    *v = static_cast<int32_t>(u);
    return absl::OkStatus();
  }
  absl::Status I64(const char* field, int64_t* v) {
    uint64_t u = 0;
    RETURN_IF_ERROR(U64(field, &u));
    *v = static_cast<int64_t>(u);
    return absl::OkStatus();
  }
  absl::Status F32(const char* field, float* v) {
    uint32_t u = 0;
    RETURN_IF_ERROR(U32(field, &u));
    *v = std::bit_cast<float>(u);
    return absl::OkStatus();
  }
  absl::Status Bytes(const char* field, size_t n, std::string_view* v) {
    RETURN_IF_ERROR(Need(n, field));
    *v = data_.substr(pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

 private:
  std::string_view data_;
  size_t pos_, end_;
};

struct Header {
  uint32_t version = 0;
  std::string fingerprint;
  AttentionKind kind = AttentionKind::kLinearElu;
  uint32_t num_layers = 0, hidden = 0, heads = 0, feature_dim = 0, conv_kernel = 0;
  uint32_t block_size = 0;
  int64_t position = 0;
  std::vector<int32_t> pending;
  SamplingParams sampling;
  std::array<uint64_t, 4> rng{};
  std::string text_tail;
};

// Checks length, magic and version (in that order), and the checksum when `verify_crc`.
// On success `*header_len` is the header length field.
absl::Status CheckPrefix(std::string_view blob, bool verify_crc, uint32_t* version,
                         uint32_t* header_len) {
  if (blob.size() < kMinBytes) {
    return absl::DataLossError(absl::StrCat("truncated checkpoint: ", blob.size(),
                                            " bytes, a checkpoint has at least ", kMinBytes));
  }
  if (std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("not a flatstate checkpoint (bad magic)");
  }
  *version = LoadU32(blob.data() + 8);
  if (*version != kCheckpointVersion) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported checkpoint format version ",
                                                   *version, " (this build reads version ",
                                                   kCheckpointVersion, ")"));
  }
  if (verify_crc) {
    const size_t body = blob.size() - kCrcBytes;
    const uint32_t stored = LoadU32(blob.data() + body);
    if (Crc32c(blob.data(), body) != stored) {
      return absl::DataLossError("checksum mismatch: checkpoint is corrupted");
    }
  }
  *header_len = LoadU32(blob.data() + 12);
  return absl::OkStatus();
}

// Parses the header fields, which must fill exactly `header_len` bytes after the prefix.
absl::Status ParseHeaderFields(std::string_view blob, uint32_t header_len, Header* h) {
  const size_t body_end = blob.size() - kCrcBytes;
  if (header_len > body_end - kPrefixBytes) {
    return absl::DataLossError(absl::StrCat("truncated checkpoint: field header needs ", header_len,
                                            " bytes, ", body_end - kPrefixBytes, " left"));
  }
  Reader r(blob, kPrefixBytes, kPrefixBytes + header_len);
  uint32_t fp_len = 0;
  std::string_view fp;
  RETURN_IF_ERROR(r.U32("fingerprint length", &fp_len));
  RETURN_IF_ERROR(r.Bytes("fingerprint", fp_len, &fp));
  h->fingerprint.assign(fp.data(), fp.size());
  uint8_t kind = 0;
  RETURN_IF_ERROR(r.U8("attention_kind", &kind));
  if (kind > kMaxKind) {
    return absl::DataLossError(
        absl::StrCat("checkpoint field attention_kind has unknown value ", kind));
  }
  h->kind = static_cast<AttentionKind>(kind);
  RETURN_IF_ERROR(r.U32("num_hidden_layers", &h->num_layers));
  RETURN_IF_ERROR(r.U32("hidden_size", &h->hidden));
  RETURN_IF_ERROR(r.U32("num_attention_heads", &h->heads));
  RETURN_IF_ERROR(r.U32("feature_dim", &h->feature_dim));
  RETURN_IF_ERROR(r.U32("conv_kernel_size", &h->conv_kernel));
  RETURN_IF_ERROR(r.U32("block_size", &h->block_size));
  RETURN_IF_ERROR(r.I64("position", &h->position));
  // Bounded so that position + pending count cannot overflow.
  if (h->position < 0 || h->position > std::numeric_limits<int64_t>::max() / 2) {
    return absl::DataLossError(
        absl::StrCat("checkpoint field position is out of range: ", h->position));
  }
  uint32_t n_pending = 0;
  RETURN_IF_ERROR(r.U32("pending count", &n_pending));
  RETURN_IF_ERROR(r.Need(size_t{n_pending} * 4, "pending tokens"));
  h->pending.resize(n_pending);
  for (int32_t& t : h->pending) RETURN_IF_ERROR(r.I32("pending tokens", &t));
  RETURN_IF_ERROR(r.F32("sampling.temperature", &h->sampling.temperature));
  RETURN_IF_ERROR(r.U32("sampling.top_k", &h->sampling.top_k));
  RETURN_IF_ERROR(r.F32("sampling.top_p", &h->sampling.top_p));
  RETURN_IF_ERROR(r.U64("sampling.seed", &h->sampling.seed));
  for (uint64_t& w : h->rng) RETURN_IF_ERROR(r.U64("rng state", &w));
  uint32_t tail_len = 0;
  RETURN_IF_ERROR(r.U32("text tail length", &tail_len));
  if (tail_len > kMaxTextTail) {
    return absl::DataLossError(absl::StrCat("checkpoint text tail length ", tail_len, " > ",
                                            kMaxTextTail));
  }
  std::string_view tail;
  RETURN_IF_ERROR(r.Bytes("text tail", tail_len, &tail));
  h->text_tail.assign(tail.data(), tail.size());
  if (r.remaining() != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint header length ", header_len, " has ",
                                            r.remaining(), " bytes beyond the last header field"));
  }
  return absl::OkStatus();
}

absl::Status ShapeMismatch(const char* field, uint64_t blob_value, uint64_t model_value) {
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", field, " = ", blob_value, ", this model has ", field, " = ", model_value));
}

// Floats of payload a checkpoint of `config` must carry; false when it would overflow.
bool ExpectedPayloadFloats(const ModelConfig& config, int64_t position, uint64_t* floats) {
  if (config.is_linear()) {
    *floats = uint64_t{config.state_floats_per_layer()} * config.num_hidden_layers;
    return true;
  }
  const uint64_t per_token = 2 * uint64_t(config.num_hidden_layers) * uint64_t(config.hidden_size);
  const uint64_t pos = static_cast<uint64_t>(position);
  if (per_token != 0 && pos > std::numeric_limits<uint64_t>::max() / per_token) return false;
  *floats = pos * per_token;
  return true;
}

// Releases the blocks of `table` back to `pool` unless dismissed.
class BlockReleaser {
 public:
  BlockReleaser(KvBlockPool* pool, std::vector<int32_t>* table) : pool_(pool), table_(table) {}
  ~BlockReleaser() {
    if (pool_ != nullptr) pool_->Release(table_);
  }
  void Dismiss() { pool_ = nullptr; }

 private:
  KvBlockPool* pool_;
  std::vector<int32_t>* table_;
};

}  // namespace

absl::StatusOr<std::string> SerializeSession(const CheckpointModel& model,
                                             const SessionState& state, const KvBlockPool* pool) {
  const ModelConfig& c = model.config;
  if (state.position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SerializeSession: negative position ", state.position));
  }
  uint64_t payload_floats = 0;
  if (!ExpectedPayloadFloats(c, state.position, &payload_floats) ||
      payload_floats > std::numeric_limits<uint64_t>::max() / sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SerializeSession: position ", state.position, " is too large"));
  }
  if (c.is_linear()) {
    if (state.linear.size() != payload_floats) {
      return absl::InvalidArgumentError(
          absl::StrCat("SerializeSession: linear state has ", state.linear.size(),
                       " floats, model ", KindName(c.attention_kind), " needs ", payload_floats));
    }
  } else {
    if (pool == nullptr) {
      return absl::InvalidArgumentError("SerializeSession: softmax session needs the KV pool");
    }
    if (pool->num_layers() != c.num_hidden_layers || pool->hidden() != c.hidden_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("SerializeSession: KV pool shape (layers ", pool->num_layers(), ", hidden ",
                       pool->hidden(), ") does not match the model (layers ", c.num_hidden_layers,
                       ", hidden ", c.hidden_size, ")"));
    }
    const int64_t bs = pool->block_size();
    if (state.position > int64_t{pool->blocks_total()} * bs) {
      return absl::InvalidArgumentError(absl::StrCat("SerializeSession: position ", state.position,
                                                     " exceeds the KV pool's capacity"));
    }
    const int64_t blocks_needed = (state.position + bs - 1) / bs;
    if (static_cast<int64_t>(state.kv_blocks.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat("SerializeSession: block table has ",
                                                     state.kv_blocks.size(), " blocks, position ",
                                                     state.position, " needs ", blocks_needed));
    }
    for (int64_t i = 0; i < blocks_needed; ++i) {
      const int32_t b = state.kv_blocks[i];
      if (b < 0 || b >= pool->blocks_total()) {
        return absl::InvalidArgumentError(absl::StrCat("SerializeSession: block table entry ", i,
                                                       " = ", b, " is outside the pool of ",
                                                       pool->blocks_total(), " blocks"));
      }
    }
  }
  if (state.text_tail.size() > kMaxTextTail) {
    return absl::InvalidArgumentError("SerializeSession: text_tail longer than 3 bytes");
  }
  if (state.pending.size() > std::numeric_limits<uint32_t>::max() ||
      model.fingerprint.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("SerializeSession: pending tokens or fingerprint too long");
  }

  std::string out;
  out.reserve(kMinBytes + 128 + model.fingerprint.size() + 4 * state.pending.size() +
              payload_floats * sizeof(float));
  Writer w(&out);
  w.Bytes(std::string_view(kMagic, sizeof(kMagic)));
  w.U32(kCheckpointVersion);
  const size_t header_len_at = out.size();
  w.U32(0);  // patched below
  w.U32(static_cast<uint32_t>(model.fingerprint.size()));
  w.Bytes(model.fingerprint);
  w.U8(static_cast<uint8_t>(c.attention_kind));
  w.U32(static_cast<uint32_t>(c.num_hidden_layers));
  w.U32(static_cast<uint32_t>(c.hidden_size));
  w.U32(static_cast<uint32_t>(c.num_attention_heads));
  w.U32(static_cast<uint32_t>(c.feature_dim()));
  w.U32(static_cast<uint32_t>(c.conv_kernel_size));
  w.U32(c.is_linear() ? 0u : static_cast<uint32_t>(pool->block_size()));
  w.I64(state.position);
  w.U32(static_cast<uint32_t>(state.pending.size()));
  for (int32_t t : state.pending) w.I32(t);
  w.F32(state.sampling.temperature);
  w.U32(state.sampling.top_k);
  w.F32(state.sampling.top_p);
  w.U64(state.sampling.seed);
  for (uint64_t s : state.rng.state()) w.U64(s);
  w.U32(static_cast<uint32_t>(state.text_tail.size()));
  w.Bytes(state.text_tail);
  w.PatchU32(header_len_at, static_cast<uint32_t>(out.size() - kPrefixBytes));

  w.U64(payload_floats);
  if (c.is_linear()) {
    w.Floats(state.linear.data(), state.linear.size());
  } else {
    const int bs = pool->block_size();
    const int hidden = c.hidden_size;
    for (int64_t t = 0; t < state.position; ++t) {
      const int32_t block = state.kv_blocks[t / bs];
      const int slot = static_cast<int>(t % bs);
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        w.Floats(pool->K(block, l, slot), hidden);
        w.Floats(pool->V(block, l, slot), hidden);
      }
    }
  }
  w.U32(Crc32c(out.data(), out.size()));
  return out;
}

absl::Status RestoreSession(const CheckpointModel& model, std::string_view blob, KvBlockPool* pool,
                            SessionState* out) {
  const ModelConfig& c = model.config;
  Header h;
  uint32_t header_len = 0;
  RETURN_IF_ERROR(CheckPrefix(blob, /*verify_crc=*/true, &h.version, &header_len));
  RETURN_IF_ERROR(ParseHeaderFields(blob, header_len, &h));

  const size_t body_end = blob.size() - kCrcBytes;
  Reader r(blob, kPrefixBytes + header_len, body_end);
  uint64_t payload_floats = 0;
  RETURN_IF_ERROR(r.U64("payload count", &payload_floats));
  if (payload_floats > r.remaining() / sizeof(float)) {
    return absl::DataLossError(absl::StrCat("truncated checkpoint: field payload needs ",
                                            payload_floats, " floats, ", r.remaining(),
                                            " bytes left"));
  }

  if (h.fingerprint != model.fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint is for model fingerprint ",
                                                      absl::CEscape(h.fingerprint),
                                                      ", this model is ", model.fingerprint));
  }
  if (h.kind != c.attention_kind) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint attention_kind = ", KindName(h.kind), ", this model has ",
                     "attention_kind = ", KindName(c.attention_kind)));
  }
  const std::pair<const char*, std::pair<uint64_t, uint64_t>> shapes[] = {
      {"num_hidden_layers", {h.num_layers, uint64_t(c.num_hidden_layers)}},
      {"hidden_size", {h.hidden, uint64_t(c.hidden_size)}},
      {"num_attention_heads", {h.heads, uint64_t(c.num_attention_heads)}},
      {"feature_dim", {h.feature_dim, uint64_t(c.feature_dim())}},
      {"conv_kernel_size", {h.conv_kernel, uint64_t(c.conv_kernel_size)}},
  };
  for (const auto& [field, values] : shapes) {
    if (values.first != values.second) return ShapeMismatch(field, values.first, values.second);
  }

  uint64_t expected = 0;
  if (!ExpectedPayloadFloats(c, h.position, &expected) || payload_floats != expected) {
    return absl::DataLossError(absl::StrCat("checkpoint payload has ", payload_floats,
                                            " floats, the header (position ", h.position,
                                            ") implies ", expected));
  }
  std::string_view payload;
  RETURN_IF_ERROR(r.Bytes("payload", payload_floats * sizeof(float), &payload));
  if (r.remaining() != 0) {
    return absl::DataLossError(
        absl::StrCat("checkpoint has ", r.remaining(), " trailing bytes after the payload"));
  }
  for (size_t i = 0; i < h.pending.size(); ++i) {
    if (h.pending[i] < 0 || h.pending[i] >= c.vocab_size) {
      return absl::DataLossError(absl::StrCat("checkpoint pending token ", i, " = ", h.pending[i],
                                              " is outside the vocabulary of ", c.vocab_size));
    }
  }
  if (absl::Status s = ValidateSamplingParams(h.sampling); !s.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint has invalid ", s.message()));
  }
  if (h.rng == std::array<uint64_t, 4>{}) {
    return absl::DataLossError("checkpoint rng state is all zero");
  }

  SessionState st;
  st.position = h.position;
  st.pending = std::move(h.pending);
  st.sampling = h.sampling;
  st.rng.set_state(h.rng);
  st.text_tail = std::move(h.text_tail);
  if (c.is_linear()) {
    st.linear.resize(payload_floats);
    LoadFloats(payload.data(), payload_floats, st.linear.data());
  } else {
    if (pool == nullptr) {
      return absl::InvalidArgumentError("RestoreSession: softmax checkpoint needs the KV pool");
    }
    if (pool->num_layers() != c.num_hidden_layers || pool->hidden() != c.hidden_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("RestoreSession: KV pool shape (layers ", pool->num_layers(), ", hidden ",
                       pool->hidden(), ") does not match the model (layers ", c.num_hidden_layers,
                       ", hidden ", c.hidden_size, ")"));
    }
    RETURN_IF_ERROR(pool->Reserve(&st.kv_blocks, h.position));
    BlockReleaser releaser(pool, &st.kv_blocks);  // until every row is in place
    const int bs = pool->block_size();
    const size_t row_bytes = sizeof(float) * c.hidden_size;
    const char* src = payload.data();
    for (int64_t t = 0; t < h.position; ++t) {
      const int32_t block = st.kv_blocks[t / bs];
      const int slot = static_cast<int>(t % bs);
      for (int l = 0; l < c.num_hidden_layers; ++l) {
        LoadFloats(src, c.hidden_size, pool->K(block, l, slot));
        src += row_bytes;
        LoadFloats(src, c.hidden_size, pool->V(block, l, slot));
        src += row_bytes;
      }
    }
    releaser.Dismiss();
  }
  *out = std::move(st);
  return absl::OkStatus();
}

absl::StatusOr<CheckpointHeader> ReadCheckpointHeader(std::string_view blob) {
  Header h;
  uint32_t header_len = 0;
  RETURN_IF_ERROR(CheckPrefix(blob, /*verify_crc=*/false, &h.version, &header_len));
  RETURN_IF_ERROR(ParseHeaderFields(blob, header_len, &h));
  CheckpointHeader out;
  out.version = h.version;
  out.fingerprint = std::move(h.fingerprint);
  out.attention_kind = h.kind;
  out.context_tokens = h.position + static_cast<int64_t>(h.pending.size());
  return out;
}

}  // namespace flatstate
