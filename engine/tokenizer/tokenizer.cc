#include "engine/tokenizer/tokenizer.h"

#include "absl/strings/str_cat.h"

namespace flatstate {

std::string Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string state, out;
  for (int32_t id : ids) out += DecodeNext(id, &state);
  out += DecodeFlush(&state);
  return out;
}

absl::Status Tokenizer::ValidateIds(std::span<const int32_t> ids, std::string_view field) const {
  const int vocab = vocab_size();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(field), "[", i, "] = ", ids[i],
                                                     " is out of range [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace flatstate
