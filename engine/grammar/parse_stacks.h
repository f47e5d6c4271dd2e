// The parse stacks of a GrammarState and the step that advances them by one byte.
//
// A parse stack is a list of element positions in a CompiledGrammar: the top (last) is the
// terminal (kByte or kClass) to match next, the ones below are where to resume after each
// enclosing rule ends. An empty stack means the input so far is a complete match. StackSet holds
// distinct stacks in insertion order (deterministic). StackStepper advances a set by one byte,
// expanding rule references and popping finished alternatives; it drops a path that would grow a
// stack past GrammarLimits::max_depth (deeper nesting is simply not matched) and fails with
// ResourceExhausted when a set would exceed max_stacks. Both are thread-compatible: one per thread.
#ifndef FLATSTATE_ENGINE_GRAMMAR_PARSE_STACKS_H_
#define FLATSTATE_ENGINE_GRAMMAR_PARSE_STACKS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "engine/grammar/code_points.h"
#include "engine/grammar/compiled_grammar.h"

namespace flatstate::grammar {

// A stack entry below which nothing is known (TokenMasker's context-free walks): popping into it
// yields the one-entry stack [kBottom], which no byte advances.
inline constexpr uint32_t kBottom = 0xFFFFFFFF;

struct GrammarLimits {
  uint32_t max_depth = 256;    // positions per stack
  uint32_t max_stacks = 1024;  // stacks alive at once
};

class StackSet {
 public:
  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  std::span<const uint32_t> stack(size_t i) const {
    const uint32_t begin = i == 0 ? 0 : ends_[i - 1];
    return {data_.data() + begin, ends_[i] - begin};
  }
  // Whether some stack is empty (the input so far is a complete match).
  bool HasEmpty() const;
  void Clear() {
    data_.clear();
    ends_.clear();
    hashes_.clear();
  }
  // Appends `s` unless an equal stack is present. Returns false when that would exceed `limit`.
  bool Add(std::span<const uint32_t> s, uint32_t limit);
  bool operator==(const StackSet& o) const { return data_ == o.data_ && ends_ == o.ends_; }

 private:
  std::vector<uint32_t> data_;
  std::vector<uint32_t> ends_;
  std::vector<uint64_t> hashes_;
};

class StackStepper {
 public:
  StackStepper(const CompiledGrammar& grammar, const GrammarLimits& limits)
      : g_(grammar), limits_(limits) {}

  // The stacks before any input: the root rule expanded.
  absl::Status Initial(StackSet* out);
  // out = the stacks of `in` that take `byte`, advanced past it. `after` is the UTF-8 cursor once
  // the byte is read; `complete`/`cp` what Utf8Cursor::Step reported for it.
  absl::Status Advance(const StackSet& in, uint8_t byte, const Utf8Cursor& after, bool complete,
                       uint32_t cp, StackSet* out);
  // out = the stacks from ending the alternative whose caller is `stack`'s top: its top is
  // resumed (an empty `stack` gives the empty, complete stack).
  absl::Status Resume(std::span<const uint32_t> stack, StackSet* out);
  // A superset of the bytes some stack of `in` can take next, with the input at `cursor`.
  void NextBytes(const StackSet& in, const Utf8Cursor& cursor, ByteSet* out) const;
  // The largest stack built (or refused for depth) since construction.
  size_t max_seen() const { return max_seen_; }

 private:
  // Adds every stack reachable from work_ + [pos] to *out_.
  void Expand(uint32_t pos);

  const CompiledGrammar& g_;
  GrammarLimits limits_;
  std::vector<uint32_t> work_;
  StackSet* out_ = nullptr;
  bool overflow_ = false;
  size_t max_seen_ = 0;
};

}  // namespace flatstate::grammar

#endif  // FLATSTATE_ENGINE_GRAMMAR_PARSE_STACKS_H_
