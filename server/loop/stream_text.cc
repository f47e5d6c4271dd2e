#include "server/loop/stream_text.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace flatstate::server {

bool StreamText::Push(TokenDecoder* decoder, int32_t token, std::string* text) {
  *text = decoder->Push(token);
  if (stop_.empty() || text->empty()) return false;
  const size_t old_len = text_.size();
  text_ += *text;
  return StopEndsAfter(text_, old_len);
}

bool StreamText::StopEndsAfter(const std::string& text, size_t old_len) const {
  for (const std::string& stop : stop_) {
    // Only a match that ends in the new text is new.
    const size_t from = old_len >= stop.size() ? old_len - stop.size() + 1 : 0;
    if (text.find(stop, from) != std::string::npos) return true;
  }
  return false;
}

size_t StreamText::TokensBeforeStop(TokenDecoder decoder, std::span<const int32_t> tokens) const {
  if (stop_.empty()) return tokens.size();
  size_t longest = 0;
  for (const std::string& stop : stop_) longest = std::max(longest, stop.size());
  // A match ending in new text starts at most longest - 1 bytes back.
  std::string tail = text_.substr(text_.size() - std::min(text_.size(), longest));
  for (size_t j = 0; j < tokens.size(); ++j) {
    const std::string piece = decoder.Push(tokens[j]);
    if (piece.empty()) continue;
    const size_t old_len = tail.size();
    tail += piece;
    if (StopEndsAfter(tail, old_len)) return j;
  }
  return tokens.size();
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
