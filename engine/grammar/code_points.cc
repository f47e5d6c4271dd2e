#include "engine/grammar/code_points.h"

#include <algorithm>

namespace flatstate::grammar {
namespace {

constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;

int EncodedLength(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

void SetBit(uint64_t bits[4], unsigned b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }

}  // namespace

CodePointSet CodePointSet::FromRanges(std::vector<Range> ranges) {
  std::vector<Range> clipped;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (lo < kSurrogateLo && hi > kSurrogateHi) {
      clipped.push_back({lo, kSurrogateLo - 1});
      clipped.push_back({kSurrogateHi + 1, hi});
    } else if (lo >= kSurrogateLo && hi <= kSurrogateHi) {
      continue;
    } else if (lo >= kSurrogateLo && lo <= kSurrogateHi) {
      clipped.push_back({kSurrogateHi + 1, hi});
    } else if (hi >= kSurrogateLo && hi <= kSurrogateHi) {
      clipped.push_back({lo, kSurrogateLo - 1});
    } else {
      clipped.push_back({lo, hi});
    }
  }
  std::sort(clipped.begin(), clipped.end());
  CodePointSet set;
  for (const Range& r : clipped) {
    if (!set.ranges_.empty() && r.first <= set.ranges_.back().second + 1) {
      set.ranges_.back().second = std::max(set.ranges_.back().second, r.second);
    } else {
      set.ranges_.push_back(r);
    }
  }
  return set;
}

CodePointSet CodePointSet::Complement() const {
  std::vector<Range> out;
  uint32_t next = 0;
  for (const Range& r : ranges_) {
    if (r.first > next) out.push_back({next, r.first - 1});
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return FromRanges(std::move(out));
}

bool CodePointSet::Contains(uint32_t cp) const { return Intersects(cp, cp); }

bool CodePointSet::Intersects(uint32_t lo, uint32_t hi) const {
  // First range whose end is >= lo.
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                             [](const Range& r, uint32_t v) { return r.second < v; });
  return it != ranges_.end() && it->first <= hi;
}

void CodePointSet::LeadBytes(uint64_t bits[4]) const {
  bits[0] = bits[1] = bits[2] = bits[3] = 0;
  for (unsigned b = 0; b < 256; ++b) {
    uint32_t lo, hi;
    if (b < 0x80) {
      lo = hi = b;
    } else {
      Utf8Cursor c;
      bool complete;
      uint32_t cp;
      if (!c.Step(static_cast<uint8_t>(b), &complete, &cp)) continue;
      c.Pending(&lo, &hi);
    }
    if (Intersects(lo, hi)) SetBit(bits, b);
  }
}

bool Utf8Cursor::Step(uint8_t byte, bool* complete, uint32_t* cp) {
  if (need == 0) {
    if (byte < 0x80) {
      *complete = true;
      *cp = byte;
      return true;
    }
    const int len = EncodedLength(byte);
    if (len == 0) return false;
    lead = byte;
    need = static_cast<uint8_t>(len - 1);
    value = byte & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    *complete = false;
    return true;
  }
  if ((byte & 0xC0) != 0x80) return false;
  if (need == EncodedLength(lead) - 1) {            // the second byte
    if (lead == 0xE0 && byte < 0xA0) return false;  // overlong
    if (lead == 0xED && byte > 0x9F) return false;  // surrogate
    if (lead == 0xF0 && byte < 0x90) return false;  // overlong
    if (lead == 0xF4 && byte > 0x8F) return false;  // past U+10FFFF
  }
  value = (value << 6) | (byte & 0x3F);
  if (--need == 0) {
    lead = 0;
    *complete = true;
    *cp = value;
    value = 0;
    return true;
  }
  *complete = false;
  return true;
}

void Utf8Cursor::Pending(uint32_t* lo, uint32_t* hi) const {
  const int len = EncodedLength(lead);
  const uint32_t min_for_len = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  *lo = std::max(value << (6 * need), min_for_len);
  *hi = std::min((value << (6 * need)) | ((uint32_t{1} << (6 * need)) - 1), kMaxCodePoint);
}

bool Utf8Cursor::IsValid() const {
  if (need == 0) return lead == 0 && value == 0;
  const int len = EncodedLength(lead);
  if (len == 0 || need >= len) return false;
  const int read = len - 1 - need;  // continuation bytes read
  const uint32_t lead_bits = lead & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  if ((value >> (6 * read)) != lead_bits) return false;
  uint32_t lo, hi;
  Pending(&lo, &hi);
  return lo <= hi && !(lo >= kSurrogateLo && hi <= kSurrogateHi);
}

}  // namespace flatstate::grammar
