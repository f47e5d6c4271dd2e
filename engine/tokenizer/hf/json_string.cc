#include "engine/tokenizer/hf/json_string.h"

#include <bit>
#include <cstring>

#include "engine/tokenizer/hf/text_util.h"

namespace flatstate::hf {

bool JsonStringScanner::Hex4(uint32_t* v) {
  if (pos_ + 4 > s_.size()) return Fail("short \\u escape");
  *v = 0;
  for (int k = 0; k < 4; ++k) {
    const char c = s_[pos_++];
    *v <<= 4;
    if (c >= '0' && c <= '9') {
      *v |= c - '0';
    } else if (c >= 'a' && c <= 'f') {
      *v |= c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      *v |= c - 'A' + 10;
    } else {
      return Fail("bad \\u escape");
    }
  }
  return true;
}

bool JsonStringScanner::Read(std::string_view* out) {
  if (pos_ >= s_.size() || s_[pos_] != '"') return Fail("expected a string");
  const size_t start = ++pos_;
  if (!Run()) return false;
  if (s_[pos_] == '"') {
    *out = s_.substr(start, pos_ - start);
    ++pos_;
    return true;
  }
  scratch_->assign(s_.data() + start, pos_ - start);
  if (!Escaped(scratch_)) return false;
  *out = *scratch_;
  return true;
}

// Moves pos_ over string characters (valid UTF-8, no control character) up to the next '"' or
// '\\'. Finds the next byte to look at eight bytes at a time.
bool JsonStringScanner::Run() {
  const char* const data = s_.data();
  const size_t n = s_.size();
  size_t p = pos_;
  while (true) {
    if (p + 8 <= n) {
      const uint64_t m = Special8(data + p);
      if (m == 0) {
        p += 8;
        continue;
      }
      p += static_cast<size_t>(std::countr_zero(m)) / 8;
    } else {
      while (p < n && !IsSpecial(static_cast<uint8_t>(data[p]))) ++p;
      if (p >= n) {
        pos_ = p;
        return Fail("unterminated string");
      }
    }
    const uint8_t c = static_cast<uint8_t>(data[p]);
    if (c < 0x80) {
      pos_ = p;
      return c >= 0x20 || Fail("control character in string");
    }
    if (c >= 0xC2 && c <= 0xDF && p + 1 < n && (static_cast<uint8_t>(data[p + 1]) & 0xC0) == 0x80) {
      p += 2;  // the common two-byte case, inline
      continue;
    }
    char32_t cp;
    const size_t len = DecodeUtf8(s_, p, &cp);
    if (cp == 0xFFFD && len == 1) {
      pos_ = p;
      return Fail("invalid UTF-8 in string");
    }
    p += len;
  }
}

// The high bit of each of the 8 bytes at p that is '"', '\\', below 0x20 or 0x80 and up (the
// lowest set bit is exact; bits above it may be spurious).
uint64_t JsonStringScanner::Special8(const char* p) {
  static_assert(std::endian::native == std::endian::little);
  constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
  uint64_t w;
  std::memcpy(&w, p, 8);
  const auto has_zero = [](uint64_t x) { return (x - kOnes) & ~x; };
  return (w | has_zero(w ^ (kOnes * '"')) | has_zero(w ^ (kOnes * '\\')) |
          ((w - kOnes * 0x20) & ~w)) &
         kHigh;
}

// The rest of a string from an escape at pos_, appended to *out up to the closing '"'.
bool JsonStringScanner::Escaped(std::string* out) {
  while (true) {
    const size_t run = pos_;
    if (!Run()) return false;
    out->append(s_.data() + run, pos_ - run);
    if (s_[pos_] == '"') {
      ++pos_;
      return true;
    }
    ++pos_;  // backslash
    if (pos_ >= s_.size()) return Fail("unterminated string");
    const char e = s_[pos_++];
    switch (e) {
      case '"':
        out->push_back('"');
        break;
      case '\\':
        out->push_back('\\');
        break;
      case '/':
        out->push_back('/');
        break;
      case 'b':
        out->push_back('\b');
        break;
      case 'f':
        out->push_back('\f');
        break;
      case 'n':
        out->push_back('\n');
        break;
      case 'r':
        out->push_back('\r');
        break;
      case 't':
        out->push_back('\t');
        break;
      case 'u': {
        uint32_t v;
        if (!Hex4(&v)) return false;
        if (v >= 0xDC00 && v < 0xE000) return Fail("lone low surrogate");
        if (v >= 0xD800 && v < 0xDC00) {
          uint32_t lo;
          if (s_.substr(pos_, 2) != "\\u") return Fail("lone high surrogate");
          pos_ += 2;
          if (!Hex4(&lo)) return false;
          if (lo < 0xDC00 || lo >= 0xE000) return Fail("bad low surrogate");
          v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
        }
        AppendUtf8(v, out);
        break;
      }
      default:
        return Fail("bad escape");
    }
  }
}

}  // namespace flatstate::hf
