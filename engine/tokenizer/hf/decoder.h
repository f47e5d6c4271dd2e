// The decoder of a Hugging Face tokenizer.json ("decoder" key): ByteLevel, Metaspace,
// ByteFallback, Fuse, Strip, Replace and Sequence, flattened into a list of steps. Two ways to
// run it:
//  - DecodeTokens: the upstream semantics on a whole token list (decode_chain of every step in
//    order, then concatenation; no decoder joins tokens with spaces);
//  - TokenBytes + LeadingStrip: the per-token form that streaming decoding uses. Each token's
//    bytes depend only on the token and on whether it is the first of the stream; a Strip after
//    Fuse (or ByteLevel) becomes a count of leading characters to drop from the stream. For valid
//    text this equals DecodeTokens; ill-formed byte runs may yield a different number of U+FFFD,
//    and a trailing Strip ("stop" > 0 after Fuse) is not applied while streaming.
//
// Immutable after FromJson, thread-safe. FromJson fails with InvalidArgument naming `where` and
// the field; decoding never fails.
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_DECODER_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_DECODER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/hf/pattern.h"
#include "nlohmann/json.hpp"

namespace flatstate::hf {

class Decoder {
 public:
  static absl::StatusOr<std::unique_ptr<Decoder>> FromJson(const nlohmann::json& j,
                                                           const std::string& where);
  std::string DecodeTokens(const std::vector<std::string>& tokens) const;
  // The bytes `token` contributes to a stream (`first`: it is the stream's first token).
  std::string TokenBytes(std::string_view token, bool first) const;
  // Leading characters `content` to drop from the start of the stream.
  int leading_strip() const { return leading_strip_; }
  const std::string& leading_strip_content() const { return leading_strip_content_; }

 private:
  enum class Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace };
  struct Step {
    Kind kind;
    std::string a, b;  // Metaspace: replacement; Strip: content; Replace: -, content
    int start = 0, stop = 0;
    bool prepend = true;  // Metaspace: prepend_scheme != never
    std::shared_ptr<Pattern> pattern;
  };
  absl::Status Add(const nlohmann::json& j, const std::string& where);

  bool none_ = false;  // JSON null: tokens joined by " "
  std::vector<Step> steps_;
  int leading_strip_ = 0;
  std::string leading_strip_content_;
};

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_DECODER_H_
