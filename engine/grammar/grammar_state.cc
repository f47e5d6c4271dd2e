#include "engine/grammar/grammar_state.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace flatstate::grammar {

absl::StatusOr<GrammarState> GrammarState::Start(std::shared_ptr<const CompiledGrammar> grammar,
                                                 const GrammarLimits& limits) {
  if (grammar == nullptr) return absl::InvalidArgumentError("grammar: null grammar");
  GrammarState state(std::move(grammar), limits);
  StackStepper stepper(*state.grammar_, limits);
  if (absl::Status s = stepper.Initial(&state.stacks_); !s.ok()) return s;
  if (state.stacks_.empty()) {
    return absl::InvalidArgumentError("grammar: the root rule matches nothing");
  }
  return state;
}

absl::Status GrammarState::Run(std::string_view bytes, StackSet* stacks, Utf8Cursor* cursor) const {
  StackStepper stepper(*grammar_, limits_);
  StackSet next;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(bytes[i]);
    bool complete = false;
    uint32_t cp = 0;
    Utf8Cursor after = *cursor;
    if (!after.Step(b, &complete, &cp)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("grammar: byte 0x%02x at offset %d is not valid UTF-8 here", b, i));
    }
    if (absl::Status s = stepper.Advance(*stacks, b, after, complete, cp, &next); !s.ok()) {
      return s;
    }
    if (next.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("grammar: byte 0x%02x at offset %d is rejected by the grammar", b, i));
    }
    std::swap(*stacks, next);
    *cursor = after;
  }
  return absl::OkStatus();
}

bool GrammarState::Accepts(std::string_view bytes) const {
  StackSet stacks = stacks_;
  Utf8Cursor cursor = cursor_;
  return Run(bytes, &stacks, &cursor).ok();
}

absl::Status GrammarState::Advance(std::string_view bytes) {
  StackSet stacks = stacks_;
  Utf8Cursor cursor = cursor_;
  if (absl::Status s = Run(bytes, &stacks, &cursor); !s.ok()) return s;
  stacks_ = std::move(stacks);
  cursor_ = cursor;
  return absl::OkStatus();
}

bool GrammarState::CanContinue() const {
  for (size_t i = 0; i < stacks_.size(); ++i) {
    if (!stacks_.stack(i).empty()) return true;
  }
  return false;
}

}  // namespace flatstate::grammar
