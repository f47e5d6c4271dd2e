// What both sides of the grammar-mask comparison share (bench/grammar_mask_timing.cc, and
// bench/grammar_llamacpp.cc, which bench/compare_grammar_llamacpp.sh compiles outside CMake with
// -std=c++17): the UTF-8 check that sorts tokens, and the (count, hash) summary of an allowed set
// that the two programs compare step by step. Header-only, standard library only.
#ifndef FLATSTATE_BENCH_GRAMMAR_BENCH_COMMON_H_
#define FLATSTATE_BENCH_GRAMMAR_BENCH_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace grammar_bench {

// Whether `s` is complete, well-formed UTF-8 (no overlong forms, surrogates or partial tail).
inline bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    const int len = c < 0x80                ? 1
                    : c >= 0xC2 && c < 0xE0 ? 2
                    : c >= 0xE0 && c < 0xF0 ? 3
                    : c >= 0xF0 && c < 0xF5 ? 4
                                            : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; ++k) {
      const uint8_t b = static_cast<uint8_t>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return false;
    }
    i += len;
  }
  return true;
}

// A set of token ids as its size and an FNV-1a hash of the ids (4 bytes each, in id order).
struct IdSet {
  size_t count = 0;
  uint64_t hash = 1469598103934665603ull;
  void Add(size_t id) {
    ++count;
    for (int b = 0; b < 4; ++b) hash = (hash ^ ((id >> (8 * b)) & 0xFF)) * 1099511628211ull;
  }
  bool operator==(const IdSet& o) const { return count == o.count && hash == o.hash; }
};

}  // namespace grammar_bench

#endif  // FLATSTATE_BENCH_GRAMMAR_BENCH_COMMON_H_
