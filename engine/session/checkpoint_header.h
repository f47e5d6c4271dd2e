// Internal to engine/session/checkpoint.cc and checkpoint_header.cc: the checkpoint frame
// (magic, version, header length, trailing CRC-32C) and the decoded header fields, shared by
// RestoreSession and ReadCheckpointHeader. Not an API: use checkpoint.h.
//
// Stateless functions; thread-compatible. Layout and error rules: docs/checkpoint-format.md.
#ifndef FLATSTATE_ENGINE_SESSION_CHECKPOINT_HEADER_H_
#define FLATSTATE_ENGINE_SESSION_CHECKPOINT_HEADER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "engine/sampling/sampler.h"
#include "engine/session/checkpoint.h"
#include "engine/session/session_state.h"

namespace flatstate::checkpoint_internal {

inline constexpr char kMagic[8] = {'F', 'S', 'C', 'K', 'P', 'T', '\0', '\1'};
inline constexpr size_t kPrefixBytes = 16;  // magic, u32 version, u32 header length
inline constexpr size_t kCrcBytes = 4;
inline constexpr size_t kMinBytes = kPrefixBytes + kCrcBytes;
// Bytes of the detokenizer's state (Tokenizer::DecodeNext's `state`; a byte-level model's is at
// most 3 bytes of one incomplete UTF-8 character). Widened from 3 to 8 without a version change:
// the field's layout is unchanged, every checkpoint an older build wrote reads here, and an older
// build refuses a longer tail with DataLoss.
inline constexpr uint32_t kMaxTextTail = 8;
inline constexpr char kCheckpointNoun[] = "checkpoint";  // "truncated checkpoint: ..."

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
  std::string grammar_source;  // version 2: GBNF text (empty: no grammar)
  std::string grammar_state;   // version 2: GrammarState::Serialize()
};

// Checks the frame (length, magic, checksum, then version: no header field is trusted before
// the checksum) and parses the header fields into `h`. On success `*header_end` is the offset of
// the payload count. Errors as RestoreSession's steps 1-5 (docs/checkpoint-format.md); `h` may
// be partly written on error.
absl::Status ReadHeader(std::string_view blob, Header* h, size_t* header_end);

// A version 2 header's grammar into `st`: its source compiled by `grammars`, its state checked
// against it. FailedPrecondition without a resolver; DataLoss when the source does not compile
// or the state does not belong to it.
absl::Status RestoreGrammar(const Header& h, const GrammarResolver* grammars, SessionState* st);

}  // namespace flatstate::checkpoint_internal

#endif  // FLATSTATE_ENGINE_SESSION_CHECKPOINT_HEADER_H_
