// Checkpoint frame and header decoding: docs/checkpoint-format.md.
#include "engine/session/checkpoint_header.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/session/checkpoint.h"
#include "engine/util/byte_reader.h"
#include "engine/util/crc32c.h"
#include "engine/util/little_endian.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace checkpoint_internal {
namespace {

constexpr int kMaxKind = static_cast<int>(AttentionKind::kHybrid);

// Checks, in this order, the length, the magic, the trailing CRC-32C and only then the version,
// so that no header field is trusted before the checksum: a flipped version word is corruption
// (DataLoss), while a blob with a correct checksum and another version is InvalidArgument. Every
// format version ends with this checksum (docs/checkpoint-format.md, Versioning).
// On success `*header_len` is the header length field.
absl::Status CheckFrame(std::string_view blob, uint32_t* version, uint32_t* header_len) {
  if (blob.size() < kMinBytes) {
    return absl::DataLossError(absl::StrCat("truncated checkpoint: ", blob.size(),
                                            " bytes, a checkpoint has at least ", kMinBytes));
  }
  if (std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("not a flatstate checkpoint (bad magic)");
  }
  const size_t body = blob.size() - kCrcBytes;
  if (Crc32c(blob.data(), body) != LoadLe32(blob.data() + body)) {
    return absl::DataLossError("checksum mismatch: checkpoint is corrupted");
  }
  *version = LoadLe32(blob.data() + 8);
  if (*version != kCheckpointVersion && *version != kCheckpointVersionGrammar) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unsupported checkpoint format version ", *version, " (this build reads versions ",
        kCheckpointVersion, " and ", kCheckpointVersionGrammar, ")"));
  }
  *header_len = LoadLe32(blob.data() + 12);
  return absl::OkStatus();
}

// Parses the header fields, which must fill exactly `header_len` bytes after the prefix.
absl::Status ParseHeaderFields(std::string_view blob, uint32_t header_len, Header* h) {
  const size_t body_end = blob.size() - kCrcBytes;
  if (header_len > body_end - kPrefixBytes) {
    return absl::DataLossError(absl::StrCat("truncated checkpoint: field header needs ", header_len,
                                            " bytes, ", body_end - kPrefixBytes, " left"));
  }
  ByteReader r(kCheckpointNoun, blob, kPrefixBytes, kPrefixBytes + header_len);
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
  if (h->version == kCheckpointVersionGrammar) {
    uint32_t len = 0;
    std::string_view bytes;
    RETURN_IF_ERROR(r.U32("grammar source length", &len));
    RETURN_IF_ERROR(r.Bytes("grammar source", len, &bytes));
    h->grammar_source.assign(bytes.data(), bytes.size());
    RETURN_IF_ERROR(r.U32("grammar state length", &len));
    RETURN_IF_ERROR(r.Bytes("grammar state", len, &bytes));
    h->grammar_state.assign(bytes.data(), bytes.size());
    if (h->grammar_source.empty() || h->grammar_state.empty()) {
      return absl::DataLossError("checkpoint version 2 has an empty grammar source or state");
    }
  }
  if (r.remaining() != 0) {
    return absl::DataLossError(absl::StrCat("checkpoint header length ", header_len, " has ",
                                            r.remaining(), " bytes beyond the last header field"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadHeader(std::string_view blob, Header* h, size_t* header_end) {
  uint32_t header_len = 0;
  RETURN_IF_ERROR(CheckFrame(blob, &h->version, &header_len));
  RETURN_IF_ERROR(ParseHeaderFields(blob, header_len, h));
  *header_end = kPrefixBytes + header_len;
  return absl::OkStatus();
}

// A version 2 checkpoint's grammar into `st`: its source compiled by `grammars`, its state
// checked against it.
absl::Status RestoreGrammar(const Header& h, const GrammarResolver* grammars, SessionState* st) {
  if (grammars == nullptr || !*grammars) {
    return absl::FailedPreconditionError(
        "checkpoint holds a grammar (constrained decoding): restore it through an Engine");
  }
  absl::StatusOr<std::shared_ptr<const GrammarConstraint>> c = (*grammars)(h.grammar_source);
  if (!c.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint grammar source: ", c.status().message()));
  }
  absl::StatusOr<grammar::GrammarState> state =
      grammar::GrammarState::Deserialize((*c)->grammar(), h.grammar_state);
  if (!state.ok()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint grammar state: ", state.status().message()));
  }
  st->grammar = SessionGrammar{std::move(*c), std::move(*state)};
  return absl::OkStatus();
}

}  // namespace checkpoint_internal

absl::StatusOr<CheckpointHeader> ReadCheckpointHeader(std::string_view blob) {
  checkpoint_internal::Header h;
  size_t header_end = 0;
  RETURN_IF_ERROR(checkpoint_internal::ReadHeader(blob, &h, &header_end));
  CheckpointHeader out;
  out.version = h.version;
  out.fingerprint = std::move(h.fingerprint);
  out.attention_kind = h.kind;
  out.context_tokens = h.position + static_cast<int64_t>(h.pending.size());
  return out;
}

}  // namespace flatstate
