// HfTokenizer: a Hugging Face tokenizer.json (BPE model) as a flatstate Tokenizer. Encoding runs
// the upstream pipeline: added tokens are cut out of the raw text (special ones only when
// parse_special), each remaining piece is normalized, cut again by the "normalized" added tokens,
// pre-tokenized and given to the BPE model; add_special applies the post-processor (or, when it
// adds nothing, tokenizer_config.json's add_bos_token / add_eos_token, as transformers' Llama
// tokenizers do). Invalid UTF-8 input is first repaired to U+FFFD (maximal subparts).
//
// Decoder state (DecodeNext/DecodeFlush; at most 3 bytes, so it fits a checkpoint's text_tail):
//   ""        a fresh stream (no token decoded yet);
//   [0x80|S]  one byte in 0x80-0xBF: the stream has started, nothing is pending, and S (0..63)
//             leading characters of the decoder's Strip content may still be dropped;
//   P         1-3 bytes starting with a UTF-8 lead byte (>= 0xC0): the bytes of an incomplete
//             character held back; the stream has started and nothing is left to strip (a
//             pending byte means text past the strip was emitted).
// A state of another form (foreign or corrupt) is read as "started, nothing to strip" with its
// first 3 bytes as pending bytes; it decodes as well as it can and never crashes. Streaming
// decodes every token, special ones included (as decode(ids, skip_special_tokens=false)).
//
// Owns the model, added vocabulary, pipeline stages and config. Immutable after loading, so
// thread-safe (the BPE word cache is internally locked). Loading fails with InvalidArgument
// naming the file and JSON path ("tokenizer.json: model.merges[17]: ..."); Encode does not fail.
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_HF_TOKENIZER_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_HF_TOKENIZER_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/hf/added_vocabulary.h"
#include "engine/tokenizer/hf/bpe_model.h"
#include "engine/tokenizer/hf/decoder.h"
#include "engine/tokenizer/hf/normalizer.h"
#include "engine/tokenizer/hf/post_processor.h"
#include "engine/tokenizer/hf/pre_tokenizer.h"
#include "engine/tokenizer/hf/tokenizer_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace flatstate {

class HfTokenizer final : public Tokenizer {
 public:
  // Reads `path` (a tokenizer.json; mapped, so it must not be truncated while this runs, as with
  // the weight files) and, beside it, tokenizer_config.json / chat_template.jinja.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromFile(const std::string& path);
  // From tokenizer.json text; `file` names it in errors.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromJson(std::string_view json,
                                                               const std::string& file,
                                                               hf::TokenizerConfig config = {});

  std::string_view kind() const override { return "hf-bpe"; }
  int vocab_size() const override { return vocab_size_; }
  int32_t bos_id() const override { return bos_id_; }
  const std::vector<int32_t>& eos_ids() const override { return eos_ids_; }
  bool has_text() const override { return true; }

  // Special tokens in `text` are plain text here (use EncodeWithOptions to parse them).
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override;
  absl::StatusOr<std::vector<int32_t>> EncodeWithOptions(
      std::string_view text, const EncodeOptions& options) const override;
  std::string TokenBytes(int32_t id) const override;
  std::vector<int32_t> SpecialIds() const override;
  std::string DecodeNext(int32_t id, std::string* state) const override;
  std::string DecodeFlush(std::string* state) const override;

  // Upstream Tokenizer::decode on a whole sequence (the reference the streaming path matches).
  std::string DecodeFull(std::span<const int32_t> ids, bool skip_special) const;
  // The vocabulary string of `id` (an added token's content), or nullptr.
  const std::string* IdToToken(int32_t id) const;
  int32_t TokenToId(std::string_view token) const;
  const hf::TokenizerConfig& config() const { return config_; }
  // True when add_special's ids come from tokenizer_config.json's add_bos_token/add_eos_token
  // (tokenizer.json's post-processor adds none), as transformers does for Llama tokenizers.
  bool special_from_config() const { return special_from_config_; }
  // Replaces the BOS / EOS ids from tokenizer_config.json by the model's (config.json,
  // generation_config.json) where those are set (bos >= 0, eos non-empty). Only before the
  // tokenizer is shared: it is the one mutation, part of construction.
  void OverrideSpecialIds(int32_t bos, const std::vector<int32_t>& eos) {
    if (bos >= 0) bos_id_ = bos;
    if (!eos.empty()) eos_ids_ = eos;
  }

 private:
  HfTokenizer() = default;
  void EncodePiece(hf::Piece piece, std::vector<int32_t>* ids) const;

  std::unique_ptr<hf::Normalizer> normalizer_;
  std::unique_ptr<hf::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<hf::BpeModel> model_;
  std::unique_ptr<hf::AddedVocabulary> added_;
  std::unique_ptr<hf::Decoder> decoder_;
  hf::PostProcessor post_;
  hf::TokenizerConfig config_;
  bool special_from_config_ = false;
  int vocab_size_ = 0;
  int32_t bos_id_ = -1;
  std::vector<int32_t> eos_ids_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_HF_TOKENIZER_H_
