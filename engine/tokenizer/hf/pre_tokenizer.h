// Pre-tokenizers of a Hugging Face tokenizer.json ("pre_tokenizer" key): ByteLevel, Split,
// Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer and Sequence.
// Each splits every piece of text into smaller pieces (and may rewrite them: ByteLevel maps bytes
// to its printable alphabet, Metaspace spaces to its replacement), as the upstream
// PreTokenizedString::split does: empty pieces are dropped.
//
// A PreTokenizer owns its patterns; it is immutable after FromJson and thread-safe. FromJson
// fails with InvalidArgument naming `where` and the field; PreTokenize never fails.
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_PRE_TOKENIZER_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flatstate::hf {

struct Piece {
  std::string text;
  // True when the piece starts at offset 0 of the original input (Metaspace's "first").
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces *pieces by their pre-tokenized pieces, in order.
  virtual void PreTokenize(std::vector<Piece>* pieces) const = 0;
  // nullptr for a JSON null (no pre-tokenizer).
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const nlohmann::json& j,
                                                                const std::string& where);
};

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_PRE_TOKENIZER_H_
