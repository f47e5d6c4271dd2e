// Normalizers of a Hugging Face tokenizer.json ("normalizer" key): NFC, NFD, NFKC, NFKD
// (utf8proc), Lowercase, Strip, Replace (String or Regex pattern), Prepend and Sequence. A
// normalizer rewrites one piece of text (the text between added tokens); the offsets the Rust
// library keeps are not needed here.
//
// A Normalizer owns its patterns; it is immutable after FromJson and thread-safe. FromJson fails
// with InvalidArgument naming `where` (e.g. "tokenizer.json: normalizer.normalizers[1]") and the
// field; Normalize never fails (its input is valid UTF-8).
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_NORMALIZER_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_NORMALIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flatstate::hf {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string* text) const = 0;
  // nullptr for a JSON null (no normalizer).
  static absl::StatusOr<std::unique_ptr<Normalizer>> FromJson(const nlohmann::json& j,
                                                              const std::string& where);
};

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_NORMALIZER_H_
