// GrammarState's serialized form (little-endian):
//   "FSGS" | version u8 (1) | grammar fingerprint u64 | key | FNV-1a 64 of everything before, u64
// where key = cursor lead u8 | need u8 | value varint | stack count varint |
//             per stack: depth varint, positions varint (bottom first).
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/grammar/grammar_state.h"

namespace flatstate::grammar {
namespace {

constexpr char kMagic[4] = {'F', 'S', 'G', 'S'};
constexpr uint8_t kVersion = 1;

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutU64(uint64_t v, std::string* out) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

uint64_t Fnv1a(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U8(uint8_t* v) {
    if (pos_ >= in_.size()) return false;
    *v = static_cast<uint8_t>(in_[pos_++]);
    return true;
  }
  bool U64(uint64_t* v) {
    if (in_.size() - pos_ < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= uint64_t{static_cast<uint8_t>(in_[pos_++])} << (8 * i);
    return true;
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!U8(&b)) return false;
      *v |= uint64_t{b & 0x7Fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

absl::Status Corrupt(std::string_view what) {
  return absl::DataLossError(absl::StrCat("grammar state: ", std::string(what)));
}

}  // namespace

std::string GrammarState::Key() const {
  std::string out;
  out.push_back(static_cast<char>(cursor_.lead));
  out.push_back(static_cast<char>(cursor_.need));
  PutVarint(cursor_.value, &out);
  PutVarint(stacks_.size(), &out);
  for (size_t i = 0; i < stacks_.size(); ++i) {
    const auto s = stacks_.stack(i);
    PutVarint(s.size(), &out);
    for (uint32_t pos : s) PutVarint(pos, &out);
  }
  return out;
}

std::string GrammarState::Serialize() const {
  std::string out(kMagic, sizeof(kMagic));
  out.push_back(static_cast<char>(kVersion));
  PutU64(grammar_->fingerprint(), &out);
  out += Key();
  PutU64(Fnv1a(out), &out);
  return out;
}

absl::StatusOr<GrammarState> GrammarState::Deserialize(
    std::shared_ptr<const CompiledGrammar> grammar, std::string_view blob,
    const GrammarLimits& limits) {
  if (grammar == nullptr) return absl::InvalidArgumentError("grammar: null grammar");
  if (blob.size() < sizeof(kMagic) + 1 + 8 + 8) return Corrupt("truncated");
  const std::string_view body = blob.substr(0, blob.size() - 8);
  Reader tail(blob.substr(blob.size() - 8));
  uint64_t checksum = 0;
  tail.U64(&checksum);
  if (checksum != Fnv1a(body)) return Corrupt("checksum mismatch");
  if (body.substr(0, 4) != std::string_view(kMagic, 4)) return Corrupt("bad magic");
  Reader r(body.substr(4));
  uint8_t version = 0;
  uint64_t fingerprint = 0;
  if (!r.U8(&version) || version != kVersion) return Corrupt("unknown version");
  if (!r.U64(&fingerprint)) return Corrupt("truncated");
  if (fingerprint != grammar->fingerprint()) {
    return absl::FailedPreconditionError(
        "grammar state: taken with a different grammar than the one given");
  }
  GrammarState state(std::move(grammar), limits);
  const CompiledGrammar& g = *state.grammar_;
  uint64_t value = 0, count = 0;
  if (!r.U8(&state.cursor_.lead) || !r.U8(&state.cursor_.need) || !r.Varint(&value) ||
      value > kMaxCodePoint) {
    return Corrupt("bad UTF-8 cursor");
  }
  state.cursor_.value = static_cast<uint32_t>(value);
  if (!state.cursor_.IsValid()) return Corrupt("bad UTF-8 cursor");
  if (!r.Varint(&count) || count == 0 || count > limits.max_stacks) {
    return Corrupt("bad stack count");
  }
  std::vector<uint32_t> stack;
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t depth = 0;
    if (!r.Varint(&depth) || depth > limits.max_depth) return Corrupt("bad stack depth");
    if (depth == 0 && !state.cursor_.AtBoundary()) return Corrupt("complete stack mid character");
    stack.clear();
    for (uint64_t d = 0; d < depth; ++d) {
      uint64_t pos = 0;
      if (!r.Varint(&pos) || pos >= g.num_elements()) return Corrupt("position out of range");
      const uint32_t p = static_cast<uint32_t>(pos);
      const ElementKind kind = g.element(p).kind;
      const bool ok = d + 1 < depth ? g.IsContinuation(p)
                                    : (kind == ElementKind::kByte || kind == ElementKind::kClass);
      if (!ok) return Corrupt("position is not a parse stack entry");
      stack.push_back(p);
    }
    const size_t before = state.stacks_.size();
    state.stacks_.Add(stack, limits.max_stacks);
    if (state.stacks_.size() == before) return Corrupt("duplicate stack");
  }
  if (!r.AtEnd()) return Corrupt("trailing bytes");
  return state;
}

}  // namespace flatstate::grammar
