// DraftPacer: the adaptive part every Drafter shares (drafter.h): how long the next draft should
// be, and when to stop drafting for a while. It weighs what a draft is expected to add against
// what verifying it costs:
//
// - Acceptance. Drafts are taken to be kept token by token with a probability p (a draft of d
//   tokens of which a are kept counts a kept of a + 1 tried, or a of a when kept whole), estimated
//   over recent drafts (each older draft's weight shrinks by kDecay per draft; a prior of 0.7
//   over two tokens at the start), separately for drafts that follow a draft kept whole and
//   drafts that follow one that fell short: text goes in and out of runs that repeat, so what the
//   last draft did says much about the next.
// - Expected tokens of a step verifying k drafted tokens: E(k) = 1 + p + ... + p^k (the step's own
//   token and the kept prefix of the draft).
// - Cost: cost[k], the time of that step over a plain one in the stream's tokens, drafting
//   included, as the caller measured it (StepCostModel, step_cost.h); unmeasured, 1 +
//   kPriorRowCost * k.
//
// Next proposes the k (<= limit, max_draft) that maximises E(k) / cost[k] (the longest of equals:
// with cost[k] = 1 for every k, always the longest). When even that is below kMinGain (no draft
// pays clearly at the estimated acceptance) and costs something, drafting pauses for a number of
// steps that doubles with each such decision in a row (1, 2, 4, ... up to kMaxPause), after which
// a probe draft runs to refresh the estimate; the doubling resets once a draft is expected to pay
// again. A pause after a refused probe is never shorter than (cost[1] - 1) / kProbeBudget steps
// (15 where a verified row costs 0.44 of a step, 29 where it costs 0.85), so where drafts keep
// failing each refused probe adds at most kProbeBudget to the steps it ends; the first pause after
// drafting stops is not held to it, so text that repeats again after one refused draft is found
// after one step, as before (a floor on every pause took linear-elu's repeated text from 1.8x to
// 1.47x: docs/benchmarks.md). A probe is one token; if it is kept, a second probe follows at
// once with the length that maximises E(k) / cost[k] at the acceptance estimated after kept drafts,
// even below kMinGain (long where kept drafts have been followed by kept ones: text that repeats in
// bursts; short where they have not). A draft is verified only up to its first refused token, so
// where drafts fail a long probe tells little more than a short one and costs its whole length (on
// a small model whose first verified row costs 1.85 plain steps, a 5-token probe cost 2.85). So
// text where drafts fail costs a one-token probe now and then, text where they are kept drafts as
// long as verifying still pays on this machine.
//
// Value type; not thread-safe; never fails.
#ifndef FLATSTATE_ENGINE_SPECULATE_DRAFT_PACER_H_
#define FLATSTATE_ENGINE_SPECULATE_DRAFT_PACER_H_

#include <span>

namespace flatstate {

class DraftPacer {
 public:
  static constexpr int kMaxPause = 64;           // steps without drafts in a pause, at most
  static constexpr double kPriorRowCost = 0.35;  // a verified row's cost in plain steps, unmeasured
  static constexpr double kDecay = 0.8;          // an older draft's weight in p, per draft
  // The expected gain a draft must reach: 10 % above break-even, for the estimate's noise (p over
  // a few drafts) and the bookkeeping outside the measured step.
  static constexpr double kMinGain = 1.1;
  // What refused probes may add to a stream's time where drafts fail: a pause after a refused
  // probe lasts at least (cost[1] - 1) / kProbeBudget steps (at most kMaxPause).
  static constexpr double kProbeBudget = 0.03;

  explicit DraftPacer(int max_draft);  // max_draft is clamped to >= 1

  // The draft length to propose now (0: none): as above, at most min(limit, max_draft). `cost`
  // as StepCostModel::Costs gives it (cost[0] = 1; entries past its end, or all when it is
  // empty, are 1 + kPriorRowCost * k). A paused step counts one step of the pause.
  int Next(int limit, std::span<const double> cost);
  // What the engine kept of the last draft (`drafted` > 0 tokens verified, `accepted` kept).
  void Feedback(int drafted, int accepted);

  // The estimated probability that the next draft's tokens are kept: the rate of drafts made
  // after a draft that ended as the last one did (kept whole, or not).
  double acceptance() const { return kept_[whole_] / tried_[whole_]; }

 private:
  int max_draft_;
  // Per outcome of the previous draft (0: it fell short, 1: kept whole): decayed kept and tried
  // tokens of the drafts made after such a draft (the prior's 0.7 x 2 each).
  double kept_[2] = {1.4, 1.4};
  double tried_[2] = {2.0, 2.0};
  int whole_ = 1;       // the outcome of the last draft
  int pause_ = 0;       // steps left without drafts
  int next_pause_ = 1;  // the length of the next pause
  bool probe_ = false;      // the next drafting step probes, whatever the estimate
  bool probing_ = false;    // the last draft was a probe (Feedback reads it)
  bool follow_up_ = false;  // the next probe follows a one-token probe that was kept
  bool refused_probe_ = false;  // the last probe was refused (its pause takes kProbeBudget's floor)
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SPECULATE_DRAFT_PACER_H_
