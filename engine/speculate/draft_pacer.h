// DraftPacer: the adaptive part every Drafter shares (drafter.h): how long the next draft may be
// and when to stop drafting for a while. Each row a draft adds costs verification time (on the
// CPU a 6-row verification costs 2-3 batch-1 decode steps; docs/benchmarks.md, "Speculative
// decoding"), so a draft that falls short makes the next one only one token longer than what it
// kept, and one kept whole doubles the next (up to max_draft). A miss (a draft of which fewer than
// kPaysOff tokens, or fewer than its length for a shorter draft, were accepted) also pauses
// drafting for a number of steps that doubles with each further miss in a row (up to kMaxPause)
// and resets once a draft pays off: text where drafts fail pays a verification now and then, not
// every step.
//
// Value type; not thread-safe; never fails.
#ifndef FLATSTATE_ENGINE_SPECULATE_DRAFT_PACER_H_
#define FLATSTATE_ENGINE_SPECULATE_DRAFT_PACER_H_

namespace flatstate {

class DraftPacer {
 public:
  static constexpr int kMaxPause = 64;  // steps without drafts after repeated misses, at most
  static constexpr int kPaysOff = 2;    // accepted tokens a draft needs not to be a miss

  explicit DraftPacer(int max_draft);  // max_draft is clamped to >= 1

  // The longest draft this step may propose: min(limit, max_draft, the adapted length), or 0
  // when limit < 1 or drafting is paused (a paused step counts one step of the pause).
  int Next(int limit);
  // What the engine kept of the last draft (`drafted` > 0 tokens verified, `accepted` kept).
  void Feedback(int drafted, int accepted);

 private:
  int max_draft_;
  int length_;          // the next draft's longest
  int pause_ = 0;       // steps left without drafts
  int next_pause_ = 1;  // the pause after the next miss
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SPECULATE_DRAFT_PACER_H_
