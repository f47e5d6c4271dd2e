#include "engine/tokenizer/ids_only_tokenizer.h"

#include "absl/strings/str_cat.h"

namespace flatstate {

absl::StatusOr<std::vector<int32_t>> IdsOnlyTokenizer::Encode(std::string_view, bool) const {
  return absl::InvalidArgumentError(
      absl::StrCat("model '", model_,
                   "' has no tokenizer.json (flatstate reads Hugging Face tokenizers from "
                   "tokenizer.json only): send token ids (prompt_tokens / prompt as an array of "
                   "ids)"));
}

}  // namespace flatstate
