#include "engine/tokenizer/hf/text_util.h"

#include <array>

#include "engine/tokenizer/byte_tokenizer.h"
#include "utf8proc.h"

namespace flatstate::hf {

bool MakeValidUtf8(std::string_view s, std::string* out) {
  size_t i = 0;
  while (i < s.size() && static_cast<uint8_t>(s[i]) < 0x80) ++i;
  bool valid = true;
  for (size_t k = i; k < s.size();) {
    char32_t cp;
    const size_t n = DecodeUtf8(s, k, &cp);
    if (cp == 0xFFFD && n == 1) {
      valid = false;
      break;
    }
    k += n;
  }
  if (valid) {
    out->assign(s);
    return false;
  }
  IncrementalDecoder d;
  out->clear();
  for (char c : s) out->append(d.Push(static_cast<uint8_t>(c)));
  out->append(d.Flush());
  return true;
}

bool IsWhitespace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool IsNumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool IsAlphanumeric(char32_t c) {
  if (c < 0x80) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  }
  const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_MC) ||
         (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

bool IsPunctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  }
  const utf8proc_category_t k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

namespace {

struct ByteTables {
  std::array<std::string, 256> to_char;
  std::array<int16_t, 324> to_byte;
  ByteTables() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const char32_t cp = printable ? b : 256 + extra++;
      AppendUtf8(cp, &to_char[b]);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables* t = new ByteTables();
  return *t;
}

}  // namespace

const std::string& ByteToChar(uint8_t b) { return Tables().to_char[b]; }

int CharToByte(char32_t c) { return c < 324 ? Tables().to_byte[c] : -1; }

}  // namespace flatstate::hf
