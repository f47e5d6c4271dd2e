// DraftModelDrafter: speculative drafts decoded by a second, smaller model with the target's
// vocabulary (a draft model, e.g. a 0.8B model of a family for its 27B sibling). It keeps a
// session of its own in the draft model's engine, fed the stream's context (Append); a draft is
// that session's greedy continuation, decoded one plain step per token. Before drafting it forks
// the session (Engine::Fork: the recurrent state copied, softmax KV blocks shared) and afterwards
// goes back to the fork, so what the target refused leaves no trace; the tokens the stream then
// emits run through the draft model as one chunk at the next draft. Lengths and pauses follow
// DraftPacer (draft_pacer.h). The target verifies every draft (engine.h), so a draft model
// changes how fast a stream goes, never what it outputs.
//
// Borrows `engine` (the draft model's), which must outlive the drafter and be used only from the
// drafter's thread (the server's engine loop runs both). Owns its sessions in that engine
// (released by the destructor). Never fails: a draft step that fails (no KV blocks, a context
// past the draft model's positions) ends drafting for good (Draft returns empty from then on).
#ifndef FLATSTATE_ENGINE_SPECULATE_DRAFT_MODEL_H_
#define FLATSTATE_ENGINE_SPECULATE_DRAFT_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/speculate/draft_pacer.h"
#include "engine/speculate/drafter.h"

namespace flatstate {

class DraftModelDrafter : public Drafter {
 public:
  DraftModelDrafter(Engine* engine, int max_draft);
  ~DraftModelDrafter() override;
  DraftModelDrafter(const DraftModelDrafter&) = delete;
  DraftModelDrafter& operator=(const DraftModelDrafter&) = delete;

  // Appends tokens to the draft session's pending context (run at the next Draft).
  void Append(std::span<const int32_t> tokens) override;
  // Runs the pending context and draws, forks (the fork without the draw), then decodes the rest
  // of the pacer's length for `limit` and `cost` (DraftPacer::Next) greedily. Empty when the
  // pacer proposes none, nothing was appended since the last draft or drafting has failed.
  std::vector<int32_t> Draft(int limit, std::span<const double> cost) override;
  // Goes back to the fork taken before the last draft and adapts the pacer.
  void Feedback(int drafted, int accepted) override;
  // A fork of the draft session (null if the fork fails: no KV block for it).
  std::unique_ptr<Drafter> Clone() override;

  bool failed() const { return failed_; }

 private:
  // Drops a draft still out: the session goes back to the fork taken before it.
  void Rewind();
  // One step of the draft session; false (and failed_) when it fails.
  bool Run(int64_t max_tokens, bool sample);

  Engine* engine_;
  DraftPacer pacer_;
  SessionState session_;              // has run the context but its pending tokens
  std::optional<SessionState> fork_;  // session_ before the last draft, while one is out
  std::vector<StepResult> results_;
  bool failed_ = false;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SPECULATE_DRAFT_MODEL_H_
