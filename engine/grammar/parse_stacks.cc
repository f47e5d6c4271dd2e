#include "engine/grammar/parse_stacks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace flatstate::grammar {
namespace {

uint64_t HashStack(std::span<const uint32_t> s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  for (uint32_t v : s) h = (h ^ v) * 0xFF51AFD7ED558CCDull;
  return h ^ (h >> 29);
}

}  // namespace

bool StackSet::HasEmpty() const {
  for (size_t i = 0; i < ends_.size(); ++i) {
    if (stack(i).empty()) return true;
  }
  return false;
}

bool StackSet::Add(std::span<const uint32_t> s, uint32_t limit) {
  const uint64_t h = HashStack(s);
  for (size_t i = 0; i < hashes_.size(); ++i) {
    if (hashes_[i] == h) {
      const auto other = stack(i);
      if (std::equal(other.begin(), other.end(), s.begin(), s.end())) return true;
    }
  }
  if (ends_.size() >= limit) return false;
  data_.insert(data_.end(), s.begin(), s.end());
  ends_.push_back(static_cast<uint32_t>(data_.size()));
  hashes_.push_back(h);
  return true;
}

void StackStepper::Expand(uint32_t pos) {
  const Element& e = g_.element(pos);
  switch (e.kind) {
    case ElementKind::kEnd: {
      if (work_.empty()) {
        if (!out_->Add({}, limits_.max_stacks)) overflow_ = true;
        return;
      }
      const uint32_t resume = work_.back();
      if (resume == kBottom) {
        if (!out_->Add(std::span<const uint32_t>(&kBottom, 1), limits_.max_stacks))
          overflow_ = true;
        return;
      }
      work_.pop_back();
      Expand(resume);
      work_.push_back(resume);
      return;
    }
    case ElementKind::kRule: {
      // Tail position: nothing to resume in this alternative, so push nothing.
      const bool push = g_.element(pos + 1).kind != ElementKind::kEnd;
      if (push) {
        if (work_.size() >= limits_.max_depth) {
          max_seen_ = std::max<size_t>(max_seen_, limits_.max_depth + 1);
          return;
        }
        work_.push_back(pos + 1);
      }
      for (uint32_t alt : g_.alternatives(e.arg)) Expand(alt);
      if (push) work_.pop_back();
      return;
    }
    case ElementKind::kByte:
    case ElementKind::kClass:
      if (work_.size() >= limits_.max_depth) {
        max_seen_ = std::max<size_t>(max_seen_, limits_.max_depth + 1);
        return;
      }
      work_.push_back(pos);
      max_seen_ = std::max(max_seen_, work_.size());
      if (!out_->Add(work_, limits_.max_stacks)) overflow_ = true;
      work_.pop_back();
      return;
  }
}

absl::Status StackStepper::Initial(StackSet* out) {
  out->Clear();
  out_ = out;
  overflow_ = false;
  work_.clear();
  for (uint32_t alt : g_.alternatives(g_.root())) Expand(alt);
  if (overflow_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("grammar: over ", limits_.max_stacks, " parse stacks at the start"));
  }
  return absl::OkStatus();
}

absl::Status StackStepper::Advance(const StackSet& in, uint8_t byte, const Utf8Cursor& after,
                                   bool complete, uint32_t cp, StackSet* out) {
  out->Clear();
  out_ = out;
  overflow_ = false;
  uint32_t lo = 0, hi = 0;
  if (!complete) after.Pending(&lo, &hi);
  for (size_t i = 0; i < in.size(); ++i) {
    const auto s = in.stack(i);
    if (s.empty()) continue;
    const uint32_t top = s.back();
    if (top == kBottom) continue;
    const Element& e = g_.element(top);
    bool advance = false;
    if (e.kind == ElementKind::kByte) {
      advance = ByteSetHas(g_.byte_set(e.arg), byte);
    } else if (complete) {
      advance = g_.char_class(e.arg).Contains(cp);
    } else if (g_.char_class(e.arg).Intersects(lo, hi)) {
      if (!out->Add(s, limits_.max_stacks)) overflow_ = true;  // mid code point: stays on top
    }
    if (advance) {
      work_.assign(s.begin(), s.end() - 1);
      Expand(top + 1);
    }
  }
  if (overflow_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("grammar: over ", limits_.max_stacks, " parse stacks (ambiguous grammar)"));
  }
  return absl::OkStatus();
}

absl::Status StackStepper::Resume(std::span<const uint32_t> stack, StackSet* out) {
  out->Clear();
  out_ = out;
  overflow_ = false;
  if (stack.empty()) {
    out->Add({}, limits_.max_stacks);
    return absl::OkStatus();
  }
  work_.assign(stack.begin(), stack.end() - 1);
  Expand(stack.back());
  if (overflow_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("grammar: over ", limits_.max_stacks, " parse stacks (ambiguous grammar)"));
  }
  return absl::OkStatus();
}

void StackStepper::NextBytes(const StackSet& in, const Utf8Cursor& cursor, ByteSet* out) const {
  *out = {0, 0, 0, 0};
  for (size_t i = 0; i < in.size(); ++i) {
    const auto s = in.stack(i);
    if (s.empty() || s.back() == kBottom) continue;
    const Element& e = g_.element(s.back());
    const ByteSet* set;
    if (e.kind == ElementKind::kByte) {
      set = &g_.byte_set(e.arg);
    } else if (cursor.AtBoundary()) {
      set = &g_.class_lead_bytes(e.arg);
    } else {
      (*out)[2] = ~uint64_t{0};  // continuation bytes 0x80..0xBF
      continue;
    }
    for (int w = 0; w < 4; ++w) (*out)[w] |= (*set)[w];
  }
}

}  // namespace flatstate::grammar
