// Unicode code point sets and incremental UTF-8 decoding for the grammar engine.
//
// CodePointSet is a value type: sorted, disjoint, non-adjacent closed ranges of Unicode scalar
// values (U+0000..U+10FFFF without the surrogates D800..DFFF, which no valid UTF-8 encodes).
// Utf8Cursor follows the bytes of one code point and, before the last byte, the interval of code
// points the bytes so far can still become; it refuses ill-formed UTF-8 (overlong forms,
// surrogates, past U+10FFFF, stray continuation bytes). Both are plain values; thread-compatible.
#ifndef FLATSTATE_ENGINE_GRAMMAR_CODE_POINTS_H_
#define FLATSTATE_ENGINE_GRAMMAR_CODE_POINTS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/util/utf8.h"

namespace flatstate::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

class CodePointSet {
 public:
  using Range = std::pair<uint32_t, uint32_t>;  // closed [first, second]

  CodePointSet() = default;
  // Any order, overlaps allowed; ranges past kMaxCodePoint are clipped, surrogates removed.
  static CodePointSet FromRanges(std::vector<Range> ranges);
  static CodePointSet All() { return FromRanges({{0, kMaxCodePoint}}); }

  CodePointSet Complement() const;
  bool Contains(uint32_t cp) const;
  // Whether some member lies in [lo, hi].
  bool Intersects(uint32_t lo, uint32_t hi) const;
  bool empty() const { return ranges_.empty(); }
  // Whether every member is ASCII (< 0x80).
  bool IsAscii() const { return ranges_.empty() || ranges_.back().second < 0x80; }
  const std::vector<Range>& ranges() const { return ranges_; }
  // The lead bytes of the UTF-8 encodings of the members, as a 256-bit set.
  void LeadBytes(uint64_t bits[4]) const;

  bool operator==(const CodePointSet& o) const { return ranges_ == o.ranges_; }

 private:
  std::vector<Range> ranges_;
};

// The project's one UTF-8 encoder (engine/util/utf8.h).
using ::flatstate::AppendUtf8;

// Where the input stands inside one UTF-8 encoded code point.
struct Utf8Cursor {
  uint8_t lead = 0;    // lead byte of the code point under way; 0 at a code point boundary
  uint8_t need = 0;    // continuation bytes still to come
  uint32_t value = 0;  // payload bits read so far

  bool AtBoundary() const { return need == 0; }
  // Consumes one byte. Returns false (cursor unspecified) for ill-formed UTF-8. Otherwise, when the
  // byte completes a code point, sets *complete = true and *cp; else *complete = false.
  bool Step(uint8_t byte, bool* complete, uint32_t* cp);
  // Mid code point: the closed interval of scalar values the bytes so far can still become.
  void Pending(uint32_t* lo, uint32_t* hi) const;
  // Whether the fields describe a state Step can reach (used when restoring a serialized state).
  bool IsValid() const;
};

}  // namespace flatstate::grammar

#endif  // FLATSTATE_ENGINE_GRAMMAR_CODE_POINTS_H_
