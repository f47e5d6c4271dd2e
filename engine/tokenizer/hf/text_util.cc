#include "engine/tokenizer/hf/text_util.h"

#include <array>

#include "engine/tokenizer/byte_tokenizer.h"
#include "utf8proc.h"

namespace flatstate::hf {

size_t DecodeUtf8(std::string_view s, size_t i, char32_t* cp) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  const size_t rest = s.size() - i;
  int need;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t v;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1, v = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2, v = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3, v = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    *cp = 0xFFFD;
    return 1;
  }
  if (rest <= static_cast<size_t>(need) || b(i + 1) < lo || b(i + 1) > hi) {
    *cp = 0xFFFD;
    return 1;
  }
  for (int k = 1; k <= need; ++k) {
    const uint8_t d = b(i + k);
    if (k > 1 && (d < 0x80 || d > 0xBF)) {
      *cp = 0xFFFD;
      return 1;
    }
    v = (v << 6) | (d & 0x3F);
  }
  *cp = v;
  return need + 1;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

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
