#include "engine/util/utf8.h"

#include <cstdint>

namespace flatstate {

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

}  // namespace flatstate
