#include "engine/grammar/trie_walk.h"

#include "absl/strings/str_cat.h"
#include "engine/grammar/token_masker.h"

namespace flatstate::grammar {
namespace {

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

}  // namespace

absl::Status TrieWalk::Run(const StackSet& stacks, const Utf8Cursor& cursor, TokenMask* mask,
                           std::vector<std::pair<uint32_t, uint32_t>>* bottoms) {
  mask_ = mask;
  bottoms_ = bottoms;
  status_ = absl::OkStatus();
  const int32_t start = Intern(stacks, cursor);
  if (start != kDead) Visit(0, start, 0);
  return status_;
}

int32_t TrieWalk::Intern(const StackSet& stacks, const Utf8Cursor& cursor) {
  key_.clear();
  key_.push_back(static_cast<char>(cursor.lead));
  key_.push_back(static_cast<char>(cursor.need));
  PutVarint(cursor.value, &key_);
  for (size_t i = 0; i < stacks.size(); ++i) {
    const auto s = stacks.stack(i);
    PutVarint(s.size(), &key_);
    for (uint32_t pos : s) PutVarint(pos, &key_);
  }
  auto [it, inserted] = ids_.try_emplace(key_, static_cast<int32_t>(states_.size()));
  if (!inserted) return it->second;
  if (states_.size() >= kMaxWalkStates) {
    status_ = absl::ResourceExhaustedError(
        absl::StrCat("grammar: token mask walk met over ", kMaxWalkStates, " parse states"));
    return kDead;
  }
  State st{stacks, cursor, {}, false, false};
  stepper_.NextBytes(stacks, cursor, &st.next);
  for (size_t i = 0; i < stacks.size(); ++i) {
    const auto s = stacks.stack(i);
    if (s.size() == 1 && s[0] == kBottom) {
      st.bottom = true;
    } else {
      st.live = true;
    }
  }
  states_.push_back(std::move(st));
  return it->second;
}

// Mid code point, the payload bits read so far matter only to classes on top of the stacks. When
// every such class holds all non-ASCII code points, they are replaced by the smallest valid ones
// (same lead byte, same bytes to come): the walk then meets one state per lead byte and length
// instead of one per prefix of every multi-byte character, and decides exactly the same.
void TrieWalk::Canonicalize(const StackSet& stacks, Utf8Cursor* cursor) const {
  for (size_t i = 0; i < stacks.size(); ++i) {
    const auto s = stacks.stack(i);
    if (s.empty() || s.back() == kBottom) continue;
    const Element& e = grammar_.element(s.back());
    if (e.kind == ElementKind::kClass && !grammar_.class_covers_non_ascii(e.arg)) return;
  }
  const uint8_t lead = cursor->lead;
  const int len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  const int read = len - 1 - cursor->need;  // continuation bytes read
  uint32_t value = lead & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (int r = 0; r < read; ++r) {
    const uint32_t low = r > 0 ? 0 : lead == 0xE0 ? 0x20 : lead == 0xF0 ? 0x10 : 0;
    value = (value << 6) | low;
  }
  cursor->value = value;
}

int32_t TrieWalk::Step(int32_t from, uint8_t byte) {
  const uint64_t key = (static_cast<uint64_t>(from) << 8) | byte;
  if (auto it = transitions_.find(key); it != transitions_.end()) return it->second;
  int32_t to = kDead;
  Utf8Cursor after = states_[static_cast<size_t>(from)].cursor;
  bool complete = false;
  uint32_t cp = 0;
  if (after.Step(byte, &complete, &cp)) {
    absl::Status s = stepper_.Advance(states_[static_cast<size_t>(from)].stacks, byte, after,
                                      complete, cp, &scratch_);
    if (!s.ok()) {
      status_ = s;
      return kDead;
    }
    if (!scratch_.empty()) {
      if (!after.AtBoundary()) Canonicalize(scratch_, &after);
      to = Intern(scratch_, after);
    }
  }
  transitions_.emplace(key, to);
  return to;
}

void TrieWalk::Visit(uint32_t node, int32_t state, size_t depth) {
  const VocabularyTrie::Node& n = trie_.node(node);
  for (uint32_t c = n.first_child; c < n.first_child + n.num_children; ++c) {
    const uint8_t b = trie_.label(c);
    if (!ByteSetHas(states_[static_cast<size_t>(state)].next, b)) continue;
    const int32_t to = Step(state, b);
    if (!status_.ok()) return;
    if (to == kDead) continue;
    const State& st = states_[static_cast<size_t>(to)];
    if (st.bottom && bottoms_ != nullptr) {
      bottoms_->push_back({c, static_cast<uint32_t>(depth + 1)});
    }
    if (!st.live) continue;
    const VocabularyTrie::Node& child = trie_.node(c);
    for (uint32_t t = child.first_token; t < child.first_token + child.num_tokens; ++t) {
      mask_->Allow(trie_.token_id(t));
    }
    if (child.num_children > 0) {
      Visit(c, to, depth + 1);
      if (!status_.ok()) return;
    }
  }
}

}  // namespace flatstate::grammar
