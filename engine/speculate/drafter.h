// Drafter: what proposes a stream's speculative drafts (StepRequest::draft, engine/runtime/
// engine.h). The engine verifies every draft, so a drafter decides only how fast a stream goes,
// never what it outputs. Implementations: PromptLookupDrafter (prompt_lookup.h: the draft
// continues an earlier occurrence of the context's suffix) and DraftModelDrafter (draft_model.h:
// a small model with the target's vocabulary decodes the draft).
//
// A drafter sees the stream's context through Append (the prompt, then every token the stream
// emits, in order), proposes with Draft (given what verification costs, step_cost.h) and learns
// with Feedback what the target kept of its last draft. Not thread-safe (one stream owns it); never
// fails: a drafter that cannot propose returns an empty draft.
#ifndef FLATSTATE_ENGINE_SPECULATE_DRAFTER_H_
#define FLATSTATE_ENGINE_SPECULATE_DRAFTER_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace flatstate {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Appends tokens to the context.
  virtual void Append(std::span<const int32_t> tokens) = 0;
  // The draft to verify after the current context: at most `limit` tokens (empty: none now).
  // `cost`: what verifying k drafted tokens costs now, as StepCostModel::Costs gives it (empty:
  // not measured); the drafter's DraftPacer weighs it against the expected gain.
  virtual std::vector<int32_t> Draft(int limit, std::span<const double> cost) = 0;
  // What the engine made of the last draft: `drafted` tokens verified, `accepted` of them kept.
  virtual void Feedback(int drafted, int accepted) = 0;
  // A drafter for a branch of the stream (an n > 1 choice forked from it): the same context and
  // adaptation so far, independent from here on. Null when it cannot be made (the branch then
  // runs without drafts).
  virtual std::unique_ptr<Drafter> Clone() = 0;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SPECULATE_DRAFTER_H_
