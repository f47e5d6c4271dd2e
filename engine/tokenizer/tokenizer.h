// Tokenizer: how a model turns text into token ids and token ids back into text. A Model owns
// one (engine/model/model.h: Model::tokenizer()), chosen by its architecture: flatstate's own
// byte-level models get ByteTokenizer (byte_tokenizer.h); a Hugging Face folder gets HfTokenizer
// (hf/hf_tokenizer.h) when it has a tokenizer.json, else IdsOnlyTokenizer (ids_only_tokenizer.h).
//
// Incremental decoding keeps its whole state in an opaque byte string (at most
// kMaxDecoderStateBytes), so a session checkpoint stores it as it is (SessionState::text_tail,
// docs/checkpoint-format.md) and a restored session continues the text exactly where it stopped.
// A tokenizer must accept any state string, also one it did not write (a corrupt or foreign
// checkpoint): it then decodes as well as it can, never crashes.
//
// Thread-safety: implementations are immutable after construction, so every method is safe from
// any thread. TokenDecoder (below) is a value type, one per stream, thread-compatible.
// Failures: Encode returns InvalidArgument when the tokenizer cannot encode text; ValidateIds
// returns InvalidArgument naming the field and index of the first id outside the vocabulary.
// Decoding never fails: an id outside the vocabulary decodes to U+FFFD (text tokenizers) or to
// nothing (IdsOnlyTokenizer).
#ifndef FLATSTATE_ENGINE_TOKENIZER_TOKENIZER_H_
#define FLATSTATE_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace flatstate {

// The most bytes of decoder state a session checkpoint carries (its text_tail field).
inline constexpr size_t kMaxDecoderStateBytes = 3;

// How EncodeWithOptions treats the text.
struct EncodeOptions {
  bool add_special = false;    // the model's BOS/EOS/template ids around the text
  bool parse_special = false;  // special-token text (e.g. "<|im_end|>") becomes its id; else text
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "bytes", "ids-only", "hf-bpe" or "rwkv-world": what the /v1/models listing and errors call it.
  virtual std::string_view kind() const = 0;
  // Token ids are [0, vocab_size()).
  virtual int vocab_size() const = 0;
  // Beginning-of-sequence id (-1: none) and end-of-sequence ids (empty: none).
  virtual int32_t bos_id() const = 0;
  virtual const std::vector<int32_t>& eos_ids() const = 0;
  // Ids that stand for control, not text (BOS, EOS and a tokenizer's special added tokens such
  // as "<|im_start|>"): constrained decoding never lets a grammar produce them as text.
  virtual std::vector<int32_t> SpecialIds() const {
    std::vector<int32_t> ids = eos_ids();
    if (bos_id() >= 0) ids.push_back(bos_id());
    return ids;
  }
  // False when the tokenizer knows no text: Encode refuses text and every token decodes to "".
  virtual bool has_text() const = 0;

  // `text` as token ids; with `add_special`, the BOS id first (when the model has one).
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_special) const = 0;
  // Encode with options; tokenizers without special tokens ignore parse_special.
  virtual absl::StatusOr<std::vector<int32_t>> EncodeWithOptions(
      std::string_view text, const EncodeOptions& options) const {
    return Encode(text, options.add_special);
  }
  // The raw bytes one token stands for (not necessarily valid UTF-8: a byte token may be half a
  // character); "" for an id outside the vocabulary or a tokenizer without text.
  virtual std::string TokenBytes(int32_t id) const = 0;

  // Incremental decoding. `state` is the decoder's whole state (start: ""); DecodeNext returns the
  // text `id` completes (valid UTF-8, possibly empty while a character is incomplete) and updates
  // `state`; DecodeFlush ends the stream (U+FFFD for an incomplete character) and clears `state`.
  virtual std::string DecodeNext(int32_t id, std::string* state) const = 0;
  virtual std::string DecodeFlush(std::string* state) const = 0;

  // Whole sequence: DecodeNext for each id from an empty state, then DecodeFlush.
  std::string Decode(std::span<const int32_t> ids) const;
  // OK iff every id is in [0, vocab_size()); else InvalidArgument like
  // "prompt_tokens[3] = 300 is out of range [0, 256)" for field "prompt_tokens".
  absl::Status ValidateIds(std::span<const int32_t> ids, std::string_view field) const;
};

// A stream's incremental decoder: a tokenizer (borrowed; must outlive it) and the opaque state.
class TokenDecoder {
 public:
  TokenDecoder() = default;  // no tokenizer: decodes nothing
  explicit TokenDecoder(const Tokenizer* tokenizer, std::string state = {})
      : tokenizer_(tokenizer), state_(std::move(state)) {}

  std::string Push(int32_t id) {
    return tokenizer_ == nullptr ? std::string() : tokenizer_->DecodeNext(id, &state_);
  }
  std::string Flush() {
    return tokenizer_ == nullptr ? std::string() : tokenizer_->DecodeFlush(&state_);
  }
  // The state to store in a checkpoint (SessionState::text_tail).
  const std::string& state() const { return state_; }
  bool has_pending() const { return !state_.empty(); }

 private:
  const Tokenizer* tokenizer_ = nullptr;
  std::string state_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_TOKENIZER_TOKENIZER_H_
