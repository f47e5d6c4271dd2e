// Byte-level tokenizer: vocabulary of 256 ids, token id == byte value. ByteTokenizer is the
// Tokenizer (tokenizer.h) of flatstate's own models; the free functions and IncrementalDecoder are
// its building blocks (and the project's UTF-8 check, IsValidUtf8).
//
// Encoding is the identity on bytes. Decoding goes through IncrementalDecoder, which turns a
// stream of byte tokens into valid UTF-8 text: it never emits half of a multi-byte character
// (an incomplete sequence is held back until it completes), and every ill-formed subsequence
// (bad lead byte, stray continuation byte, overlong form, surrogate, > U+10FFFF, truncated
// sequence, token id outside [0, 256)) becomes one U+FFFD per maximal subpart, as in the
// Unicode "substitution of maximal subparts" practice (same as Python's errors="replace").
//
// Free functions are stateless and thread-safe; ByteTokenizer is immutable, so thread-safe.
// IncrementalDecoder owns a few bytes of pending state and is thread-compatible (one per stream).
// Its pending bytes are ByteTokenizer's decoder state (at most 3 bytes, as checkpoints store
// them). None of these functions fail except ValidateTokens, which returns InvalidArgument naming
// the offending field and index.
#ifndef FLATSTATE_ENGINE_TOKENIZER_BYTE_TOKENIZER_H_
#define FLATSTATE_ENGINE_TOKENIZER_BYTE_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "engine/tokenizer/tokenizer.h"

namespace flatstate {

inline constexpr int kByteVocabSize = 256;
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// One token per byte of `text`.
std::vector<int32_t> Encode(std::string_view text);

// Whole-sequence decode: the same output as pushing every token then flushing.
std::string Decode(const std::vector<int32_t>& tokens);

// True iff `text` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool IsValidUtf8(std::string_view text);

// OK iff every token is in [0, vocab); otherwise InvalidArgument like
// "prompt_tokens[3] = 300 is out of range [0, 256)" for field "prompt_tokens".
absl::Status ValidateTokens(const std::vector<int32_t>& tokens, int vocab, std::string_view field);

class IncrementalDecoder {
 public:
  // A decoder holding `pending` (pending_bytes() of another one, e.g. from a checkpoint). Bytes
  // that do not form the start of one incomplete character leave whatever state pushing them
  // leaves (their text is dropped): never a crash, whatever the input.
  static IncrementalDecoder WithPending(std::string_view pending);

  // Returns the text completed by `token` (possibly empty while a character is incomplete).
  std::string Push(int32_t token);
  // Ends the stream: returns U+FFFD if an incomplete sequence is pending, else "". The decoder
  // is then ready for a new stream.
  std::string Flush();
  // True when bytes of an incomplete character are held back.
  bool has_pending() const { return !pending_.empty(); }
  // The held-back bytes (at most 3), e.g. to store in a checkpoint; a fresh decoder fed these
  // bytes with Push is in the same state again.
  const std::string& pending_bytes() const { return pending_; }

 private:
  // Starts a sequence with `b`, appending to `out` whatever is complete.
  void Start(uint8_t b, std::string* out);

  std::string pending_;  // bytes of the incomplete character (at most 3)
  int need_ = 0;         // continuation bytes still required
  uint8_t lo_ = 0x80;    // allowed range of the next continuation byte
  uint8_t hi_ = 0xBF;
};

class ByteTokenizer final : public Tokenizer {
 public:
  // `bos_id` (-1: none) and `eos_ids` are the model's; flatstate's own models have neither.
  explicit ByteTokenizer(int32_t bos_id = -1, std::vector<int32_t> eos_ids = {})
      : bos_id_(bos_id), eos_ids_(std::move(eos_ids)) {}

  std::string_view kind() const override { return "bytes"; }
  int vocab_size() const override { return kByteVocabSize; }
  int32_t bos_id() const override { return bos_id_; }
  const std::vector<int32_t>& eos_ids() const override { return eos_ids_; }
  bool has_text() const override { return true; }
  // One token per byte (any bytes, valid UTF-8 or not); never fails.
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override;
  std::string TokenBytes(int32_t id) const override;
  // The state is IncrementalDecoder::pending_bytes(): byte-identical to what checkpoints held
  // before the Tokenizer interface existed.
  std::string DecodeNext(int32_t id, std::string* state) const override;
  std::string DecodeFlush(std::string* state) const override;

 private:
  const int32_t bos_id_;
  const std::vector<int32_t> eos_ids_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_TOKENIZER_BYTE_TOKENIZER_H_
