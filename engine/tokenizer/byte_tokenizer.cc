#include "engine/tokenizer/byte_tokenizer.h"

#include "absl/strings/str_cat.h"

namespace flatstate {

std::vector<int32_t> Encode(std::string_view text) {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
  return ids;
}

std::string Decode(const std::vector<int32_t>& tokens) {
  IncrementalDecoder d;
  std::string out;
  for (int32_t t : tokens) out += d.Push(t);
  out += d.Flush();
  return out;
}

bool IsValidUtf8(std::string_view text) {
  // Valid UTF-8 passes through the decoder byte for byte; anything ill-formed is replaced (and
  // a replacement can never reproduce the ill-formed bytes it stands for).
  IncrementalDecoder d;
  size_t pos = 0;
  for (char c : text) {
    const std::string piece = d.Push(static_cast<uint8_t>(c));
    if (text.compare(pos, piece.size(), piece) != 0) return false;
    pos += piece.size();
  }
  return !d.has_pending();
}

absl::Status ValidateTokens(const std::vector<int32_t>& tokens, int vocab,
                            std::string_view field) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(field), "[", i, "] = ", tokens[i],
                                                     " is out of range [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

IncrementalDecoder IncrementalDecoder::WithPending(std::string_view pending) {
  IncrementalDecoder d;
  for (char c : pending) d.Push(static_cast<uint8_t>(c));
  return d;
}

void IncrementalDecoder::Start(uint8_t b, std::string* out) {
  if (b < 0x80) {
    out->push_back(static_cast<char>(b));
    return;
  }
  // Lead bytes and the range of the first continuation byte (Unicode Table 3-7).
  if (b >= 0xC2 && b <= 0xDF) {
    need_ = 1, lo_ = 0x80, hi_ = 0xBF;
  } else if (b == 0xE0) {
    need_ = 2, lo_ = 0xA0, hi_ = 0xBF;  // no overlongs
  } else if (b == 0xED) {
    need_ = 2, lo_ = 0x80, hi_ = 0x9F;  // no surrogates
  } else if (b >= 0xE1 && b <= 0xEF) {
    need_ = 2, lo_ = 0x80, hi_ = 0xBF;
  } else if (b == 0xF0) {
    need_ = 3, lo_ = 0x90, hi_ = 0xBF;  // no overlongs
  } else if (b >= 0xF1 && b <= 0xF3) {
    need_ = 3, lo_ = 0x80, hi_ = 0xBF;
  } else if (b == 0xF4) {
    need_ = 3, lo_ = 0x80, hi_ = 0x8F;  // <= U+10FFFF
  } else {  // 0x80..0xC1 (continuation or overlong lead), 0xF5..0xFF
    out->append(kReplacementChar);
    return;
  }
  pending_.assign(1, static_cast<char>(b));
}

std::string IncrementalDecoder::Push(int32_t token) {
  std::string out;
  if (token < 0 || token > 0xFF) {  // not a byte: ends any pending sequence, then one U+FFFD
    out = Flush();
    out.append(kReplacementChar);
    return out;
  }
  const uint8_t b = static_cast<uint8_t>(token);
  if (pending_.empty()) {
    Start(b, &out);
    return out;
  }
  if (b < lo_ || b > hi_) {
    // The pending bytes are a maximal ill-formed subpart; `b` starts afresh.
    out = Flush();
    Start(b, &out);
    return out;
  }
  pending_.push_back(static_cast<char>(b));
  lo_ = 0x80, hi_ = 0xBF;
  if (--need_ == 0) {
    out.swap(pending_);
    pending_.clear();
  }
  return out;
}

std::string IncrementalDecoder::Flush() {
  if (pending_.empty()) return "";
  pending_.clear();
  need_ = 0;
  lo_ = 0x80, hi_ = 0xBF;
  return std::string(kReplacementChar);
}

absl::StatusOr<std::vector<int32_t>> ByteTokenizer::Encode(std::string_view text,
                                                           bool add_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  if (add_special && bos_id_ >= 0) ids.push_back(bos_id_);
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

std::string ByteTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= kByteVocabSize) return "";
  return std::string(1, static_cast<char>(id));
}

std::string ByteTokenizer::DecodeNext(int32_t id, std::string* state) const {
  IncrementalDecoder d = IncrementalDecoder::WithPending(*state);
  std::string out = d.Push(id);
  *state = d.pending_bytes();
  return out;
}

std::string ByteTokenizer::DecodeFlush(std::string* state) const {
  IncrementalDecoder d = IncrementalDecoder::WithPending(*state);
  state->clear();
  return d.Flush();
}

}  // namespace flatstate
