// Checkpoint blob layout: docs/checkpoint-format.md. All integers and floats are little-endian.
#include "engine/session/checkpoint.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/session/checkpoint_header.h"
#include "engine/util/byte_reader.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/util/crc32c.h"
#include "engine/util/little_endian.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

using checkpoint_internal::Header;
using checkpoint_internal::kCheckpointNoun;
using checkpoint_internal::kCrcBytes;
using checkpoint_internal::kMagic;
using checkpoint_internal::kMaxTextTail;
using checkpoint_internal::kMinBytes;
using checkpoint_internal::kPrefixBytes;

static_assert(kMaxTextTail >= kMaxDecoderStateBytes, "a checkpoint holds any decoder state");

// ---- encoding ----

// Debian's abseil has its own string_view, so StrCat takes no std::string_view: convert here.
std::string KindName(AttentionKind kind) { return std::string(AttentionKindName(kind)); }

// Appends little-endian fields to `out`.
class Writer {
 public:
  explicit Writer(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { AppendLe32(v, out_); }
  void U64(uint64_t v) { AppendLe64(v, out_); }
  void I32(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F32(float v) { U32(std::bit_cast<uint32_t>(v)); }
  void Bytes(std::string_view s) { out_->append(s.data(), s.size()); }
  void Floats(const float* p, size_t n) { AppendLeFloats(p, n, out_); }
  void PatchU32(size_t offset, uint32_t v) { StoreLe32(v, out_->data() + offset); }

 private:
  std::string* out_;
};

absl::Status ShapeMismatch(const char* field, uint64_t blob_value, uint64_t model_value) {
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", field, " = ", blob_value, ", this model has ", field, " = ", model_value));
}

// InvalidArgument unless `pool` holds rows of `config`'s layers and K/V width (kv_dim: the hidden
// size for flatstate's models).
absl::Status CheckPoolShape(const char* caller, const KvBlockPool& pool,
                            const ModelConfig& config) {
  if (pool.num_layers() == config.kv_layers() && pool.hidden() == config.kv_dim()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(caller, ": KV pool shape (layers ", pool.num_layers(), ", hidden ",
                   pool.hidden(), ") does not match the model (layers ", config.kv_layers(),
                   ", hidden ", config.kv_dim(), ")"));
}

// Floats of payload a checkpoint of `config` must carry; false when it would overflow.
// The fixed-size state's floats, then the K/V rows of the softmax layers.
bool ExpectedPayloadFloats(const ModelConfig& config, int64_t position, uint64_t* floats) {
  const uint64_t state = uint64_t{config.state_floats()};
  const uint64_t per_token = 2 * uint64_t(config.kv_layers()) * uint64_t(config.kv_dim());
  const uint64_t pos = static_cast<uint64_t>(position);
  if (per_token != 0 && pos > (std::numeric_limits<uint64_t>::max() - state) / per_token) {
    return false;
  }
  *floats = state + pos * per_token;
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

// Checks that `state` can be serialized for `model` (with `pool` for softmax) and returns its
// payload size in floats.
absl::StatusOr<uint64_t> CheckSerializable(const CheckpointModel& model, const SessionState& state,
                                           const KvBlockPool* pool) {
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
  if (state.linear.size() != c.state_floats()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SerializeSession: linear state has ", state.linear.size(), " floats, model ",
                     KindName(c.attention_kind), " needs ", c.state_floats()));
  }
  if (c.has_kv()) {
    if (pool == nullptr) {
      return absl::InvalidArgumentError("SerializeSession: softmax session needs the KV pool");
    }
    RETURN_IF_ERROR(CheckPoolShape("SerializeSession", *pool, c));
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
    return absl::InvalidArgumentError(
        absl::StrCat("SerializeSession: text_tail longer than ", kMaxTextTail, " bytes"));
  }
  if (state.pending.size() > std::numeric_limits<uint32_t>::max() ||
      model.fingerprint.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("SerializeSession: pending tokens or fingerprint too long");
  }
  return payload_floats;
}

// Appends the checkpoint up to and including the payload count (magic, version, header, u64
// payload floats) to `out`.
void WriteHead(const CheckpointModel& model, const SessionState& state, const KvBlockPool* pool,
               uint64_t payload_floats, std::string* out) {
  const ModelConfig& c = model.config;
  Writer w(out);
  const size_t start = out->size();
  w.Bytes(std::string_view(kMagic, sizeof(kMagic)));
  w.U32(state.grammar.has_value() ? kCheckpointVersionGrammar : kCheckpointVersion);
  const size_t header_len_at = out->size();
  w.U32(0);  // patched below
  w.U32(static_cast<uint32_t>(model.fingerprint.size()));
  w.Bytes(model.fingerprint);
  w.U8(static_cast<uint8_t>(c.attention_kind));
  w.U32(static_cast<uint32_t>(c.num_hidden_layers));
  w.U32(static_cast<uint32_t>(c.hidden_size));
  w.U32(static_cast<uint32_t>(c.num_attention_heads));
  w.U32(static_cast<uint32_t>(c.feature_dim()));
  w.U32(static_cast<uint32_t>(c.conv_kernel_size));
  w.U32(c.has_kv() ? static_cast<uint32_t>(pool->block_size()) : 0u);
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
  if (state.grammar.has_value()) {
    const std::string& source = state.grammar->constraint->source();
    const std::string blob = state.grammar->state.Serialize();
    w.U32(static_cast<uint32_t>(source.size()));
    w.Bytes(source);
    w.U32(static_cast<uint32_t>(blob.size()));
    w.Bytes(blob);
  }
  w.PatchU32(header_len_at, static_cast<uint32_t>(out->size() - start - kPrefixBytes));
  w.U64(payload_floats);
}

// Appends the softmax payload rows of tokens [begin, end): per token, per layer, K then V.
void WriteKvRows(const ModelConfig& c, const SessionState& state, const KvBlockPool& pool,
                 int64_t begin, int64_t end, std::string* out) {
  Writer w(out);
  const int bs = pool.block_size();
  std::vector<float> row(c.kv_dim());  // widened from the pool's dtype (exact)
  for (int64_t t = begin; t < end; ++t) {
    const int32_t block = state.kv_blocks[t / bs];
    const int slot = static_cast<int>(t % bs);
    for (int l = 0; l < c.kv_layers(); ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        pool.ReadRow(block, l, kv, slot, row.data());
        w.Floats(row.data(), c.kv_dim());
      }
    }
  }
}

void AppendCrc(std::string* out) { AppendLe32(Crc32c(out->data(), out->size()), out); }

}  // namespace

absl::StatusOr<std::string> SerializeSession(const CheckpointModel& model,
                                             const SessionState& state, const KvBlockPool* pool) {
  ASSIGN_OR_RETURN(const uint64_t payload_floats, CheckSerializable(model, state, pool));
  std::string out;
  out.reserve(kMinBytes + 128 + model.fingerprint.size() + 4 * state.pending.size() +
              payload_floats * sizeof(float));
  WriteHead(model, state, pool, payload_floats, &out);
  AppendLeFloats(state.linear.data(), state.linear.size(), &out);
  if (model.config.has_kv()) WriteKvRows(model.config, state, *pool, 0, state.position, &out);
  AppendCrc(&out);
  return out;
}

int64_t KvChunkTokens(const ModelConfig& config) {
  const int64_t per_token =
      2 * int64_t{config.kv_layers()} * int64_t{config.kv_dim()} * int64_t{sizeof(float)};
  return std::clamp<int64_t>((int64_t{1} << 20) / std::max<int64_t>(per_token, 1), 1, 4096);
}

absl::StatusOr<CheckpointSplit> SerializeSessionSplit(const CheckpointModel& model,
                                                      const SessionState& state,
                                                      const KvBlockPool* pool, int64_t chunk_tokens,
                                                      int64_t first_token) {
  CheckpointSplit split;
  if (!model.config.has_kv()) {
    ASSIGN_OR_RETURN(split.head, SerializeSession(model, state, pool));
    return split;
  }
  if (chunk_tokens < 1 || first_token < 0) {
    return absl::InvalidArgumentError(absl::StrCat("SerializeSessionSplit: chunk_tokens ",
                                                   chunk_tokens, ", first_token ", first_token));
  }
  ASSIGN_OR_RETURN(const uint64_t payload_floats, CheckSerializable(model, state, pool));
  WriteHead(model, state, pool, payload_floats, &split.head);
  // A model with state and softmax layers: its state precedes the K/V rows, in the head.
  AppendLeFloats(state.linear.data(), state.linear.size(), &split.head);
  split.chunk_tokens = chunk_tokens;
  split.total_chunks = (state.position + chunk_tokens - 1) / chunk_tokens;
  split.first_chunk = std::min(first_token / chunk_tokens, split.total_chunks);
  for (int64_t c = split.first_chunk; c < split.total_chunks; ++c) {
    std::string& chunk = split.chunks.emplace_back();
    WriteKvRows(model.config, state, *pool, c * chunk_tokens,
                std::min((c + 1) * chunk_tokens, state.position), &chunk);
  }
  return split;
}

absl::StatusOr<std::string> JoinCheckpoint(std::string_view head, int64_t chunk_tokens,
                                           std::span<const std::string> chunks) {
  if (chunk_tokens == 0) {
    if (!chunks.empty()) {
      return absl::DataLossError(
          absl::StrCat("stored session has ", chunks.size(), " KV chunks but no chunk size"));
    }
    return std::string(head);
  }
  size_t bytes = head.size() + kCrcBytes;
  for (const std::string& c : chunks) bytes += c.size();
  std::string out;
  out.reserve(bytes);
  out.append(head.data(), head.size());
  for (const std::string& c : chunks) out += c;
  AppendCrc(&out);
  return out;
}

absl::Status RestoreSession(const CheckpointModel& model, std::string_view blob, KvBlockPool* pool,
                            SessionState* out, const GrammarResolver* grammars) {
  const ModelConfig& c = model.config;
  Header h;
  size_t header_end = 0;
  RETURN_IF_ERROR(checkpoint_internal::ReadHeader(blob, &h, &header_end));

  const size_t body_end = blob.size() - kCrcBytes;
  ByteReader r(kCheckpointNoun, blob, header_end, body_end);
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
  if (!h.grammar_source.empty()) {
    RETURN_IF_ERROR(checkpoint_internal::RestoreGrammar(h, grammars, &st));
  }
  st.linear.resize(c.state_floats());
  LoadLeFloats(payload.data(), st.linear.size(), st.linear.data());
  if (c.has_kv()) {
    if (pool == nullptr) {
      return absl::InvalidArgumentError("RestoreSession: softmax checkpoint needs the KV pool");
    }
    RETURN_IF_ERROR(CheckPoolShape("RestoreSession", *pool, c));
    RETURN_IF_ERROR(pool->Reserve(&st.kv_blocks, h.position));
    BlockReleaser releaser(pool, &st.kv_blocks);  // until every row is in place
    const int bs = pool->block_size();
    const size_t row_bytes = sizeof(float) * c.kv_dim();
    const char* src = payload.data() + sizeof(float) * st.linear.size();
    std::vector<float> row(c.kv_dim());
    for (int64_t t = 0; t < h.position; ++t) {
      const int32_t block = st.kv_blocks[t / bs];
      const int slot = static_cast<int>(t % bs);
      for (int l = 0; l < c.kv_layers(); ++l) {
        for (int kv = 0; kv < 2; ++kv) {
          LoadLeFloats(src, c.kv_dim(), row.data());
          pool->WriteRow(block, l, kv, slot, row.data());  // exact for a pool of the writer's dtype
          src += row_bytes;
        }
      }
    }
    releaser.Dismiss();
  }
  *out = std::move(st);
  return absl::OkStatus();
}

}  // namespace flatstate
