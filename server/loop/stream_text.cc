#include "server/loop/stream_text.h"

#include "absl/strings/str_cat.h"

namespace flatstate::server {

bool StreamText::Push(TokenDecoder* decoder, int32_t token, std::string* text) {
  *text = decoder->Push(token);
  if (stop_.empty() || text->empty()) return false;
  const size_t old_len = text_.size();
  text_ += *text;
  bool stopped = false;
  for (const std::string& stop : stop_) {
    // Only a match that ends in the new text is new.
    const size_t from = old_len >= stop.size() ? old_len - stop.size() + 1 : 0;
    if (text_.find(stop, from) != std::string::npos) stopped = true;
  }
  return stopped;
}

absl::Status EncodePrompt(const Tokenizer& tokenizer, std::string_view text,
                          std::vector<int32_t>* ids) {
  absl::StatusOr<std::vector<int32_t>> encoded = tokenizer.Encode(text, /*add_special=*/false);
  if (!encoded.ok()) {
    return absl::Status(encoded.status().code(),
                        absl::StrCat("prompt: ", encoded.status().message()));
  }
  ids->insert(ids->end(), encoded->begin(), encoded->end());
  return absl::OkStatus();
}

}  // namespace flatstate::server
