// IdsOnlyTokenizer: the Tokenizer (tokenizer.h) of a Hugging Face folder without a tokenizer.json
// (e.g. one with only SentencePiece's tokenizer.model, which flatstate does not read). It knows
// the vocabulary size and the special ids, so token-id prompts are validated and generation stops
// at EOS, but it knows no text: Encode refuses, every token decodes to "" (clients read the token
// ids), and its decoder state is always empty.
//
// Immutable after construction; thread-safe. Encode fails with InvalidArgument naming the model
// and saying what to send instead; nothing else fails.
#ifndef FLATSTATE_ENGINE_TOKENIZER_IDS_ONLY_TOKENIZER_H_
#define FLATSTATE_ENGINE_TOKENIZER_IDS_ONLY_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace flatstate {

class IdsOnlyTokenizer final : public Tokenizer {
 public:
  // `model` names the model in Encode's error.
  IdsOnlyTokenizer(std::string model, int vocab_size, int32_t bos_id, std::vector<int32_t> eos_ids)
      : model_(std::move(model)),
        vocab_size_(vocab_size),
        bos_id_(bos_id),
        eos_ids_(std::move(eos_ids)) {}

  std::string_view kind() const override { return "ids-only"; }
  int vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  const std::vector<int32_t>& eos_ids() const override { return eos_ids_; }
  bool has_text() const override { return false; }
  // InvalidArgument: "model 'x' has no tokenizer.json (flatstate reads Hugging Face tokenizers
  // from tokenizer.json only): send token ids (prompt_tokens / prompt as an array of ids)".
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override;
  std::string TokenBytes(int32_t) const override { return ""; }
  std::string DecodeNext(int32_t, std::string* state) const override {
    state->clear();
    return "";
  }
  std::string DecodeFlush(std::string* state) const override {
    state->clear();
    return "";
  }

 private:
  const std::string model_;
  const int vocab_size_;
  const int32_t bos_id_;
  const std::vector<int32_t> eos_ids_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_TOKENIZER_IDS_ONLY_TOKENIZER_H_
