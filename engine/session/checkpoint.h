// Session checkpoints: a versioned, checksummed binary blob holding everything SessionState needs
// for an exact continuation (format in docs/checkpoint-format.md).
//
// Stateless functions; thread-compatible. The readers never trust the blob: they verify the
// trailing CRC-32C before reading any header field (so a flipped version word or fingerprint
// byte is DataLoss), and fail with
//   DataLoss           bad magic, truncated, trailing bytes, checksum mismatch, sizes that do not
//                      match the header,
//   InvalidArgument    an unknown format version with a correct checksum,
//   FailedPrecondition the blob was written by another model (fingerprint or attention kind),
//   ResourceExhausted  (softmax) the KV pool cannot hold the checkpoint's blocks,
// each message naming the field or the mismatch. RestoreSession leaves `out` and the pool
// untouched on error. The order of the checks: docs/checkpoint-format.md, "Reading rules".
#ifndef FLATSTATE_ENGINE_SESSION_CHECKPOINT_H_
#define FLATSTATE_ENGINE_SESSION_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/kv/kv_block_pool.h"
#include "engine/model/config.h"
#include "engine/session/session_state.h"

namespace flatstate {

// Version 1: sessions without a grammar (written so still: the bytes older builds read). Version
// 2 adds the grammar's GBNF source and state (docs/checkpoint-format.md); written only for a
// session with a grammar. This build reads both.
inline constexpr uint32_t kCheckpointVersion = 1;
inline constexpr uint32_t kCheckpointVersionGrammar = 2;

// Compiles a checkpoint's grammar source for the restoring engine (Engine::CompileGrammar).
using GrammarResolver =
    std::function<absl::StatusOr<std::shared_ptr<const GrammarConstraint>>(std::string_view)>;

struct CheckpointModel {
  std::string fingerprint;  // Model::fingerprint()
  ModelConfig config;
};

// `pool` is required for softmax sessions (their KV rows are copied into the blob) and ignored
// for linear kinds.
absl::StatusOr<std::string> SerializeSession(const CheckpointModel& model,
                                             const SessionState& state, const KvBlockPool* pool);

// The split form of a checkpoint that shared session stores write incrementally
// (server/session_store.h). Linear kinds: `head` is the whole checkpoint, no chunks. Softmax
// layers: `head` is the checkpoint up to and including its payload count (and the fixed-size
// state's floats, for a model that has both); the KV payload is cut into
// chunks of `chunk_tokens` tokens (chunk c: tokens [c * chunk_tokens, min((c + 1) *
// chunk_tokens, position))) and `chunks` holds chunks [first_chunk, total_chunks) only.
// JoinCheckpoint(head, chunk_tokens, all chunks) is byte-identical to SerializeSession.
struct CheckpointSplit {
  std::string head;
  int64_t chunk_tokens = 0;
  int64_t total_chunks = 0;
  int64_t first_chunk = 0;
  std::vector<std::string> chunks;
};

// Tokens per KV chunk for `config`: about 1 MiB of payload per chunk, within [1, 4096].
int64_t KvChunkTokens(const ModelConfig& config);

// SerializeSession, split. Only the chunks holding tokens at or after `first_token` are written
// (first_chunk = first_token / chunk_tokens), so a session that grew by n tokens since its last
// save costs O(n + chunk_tokens) bytes. Errors as SerializeSession; InvalidArgument for
// chunk_tokens < 1 or first_token < 0 (softmax).
absl::StatusOr<CheckpointSplit> SerializeSessionSplit(const CheckpointModel& model,
                                                      const SessionState& state,
                                                      const KvBlockPool* pool, int64_t chunk_tokens,
                                                      int64_t first_token);

// Reassembles a checkpoint blob from a split's head and ALL its chunks in order (computes the
// trailing CRC; RestoreSession then checks every size). chunk_tokens == 0: `head` is the whole
// blob and `chunks` must be empty (DataLoss otherwise).
absl::StatusOr<std::string> JoinCheckpoint(std::string_view head, int64_t chunk_tokens,
                                           std::span<const std::string> chunks);

// Parses `blob` into `out`. For softmax, allocates blocks in `pool` and copies the KV rows in
// (the pool may have another block size than the writer's). On success `out` is replaced whole:
// blocks its old kv_blocks held are NOT released, so release them first. A version 2 blob's
// grammar is compiled by `grammars` (FailedPrecondition without one; DataLoss when its source
// does not compile or its state does not match the grammar).
absl::Status RestoreSession(const CheckpointModel& model, std::string_view blob, KvBlockPool* pool,
                            SessionState* out, const GrammarResolver* grammars = nullptr);

// Verifies the whole blob's checksum and parses its header (RestoreSession's steps 1-5; no
// payload checks and no model needed): which model wrote it and how many tokens it holds. Costs
// one CRC pass over the blob. An OK result means the blob is intact, not that it restores.
struct CheckpointHeader {
  uint32_t version = 0;
  std::string fingerprint;
  AttentionKind attention_kind = AttentionKind::kLinearElu;
  int64_t context_tokens = 0;
};
absl::StatusOr<CheckpointHeader> ReadCheckpointHeader(std::string_view blob);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SESSION_CHECKPOINT_H_
