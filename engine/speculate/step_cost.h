// StepCostModel: what a decoding step costs by the number of rows it runs, as measured on this
// machine, so that DraftPacer (draft_pacer.h) weighs a draft's expected gain against what its
// verification really costs here (an extra row is a tenth of a decode step on a bandwidth-bound
// model and half of one on a small compute-bound one). The caller times each step that runs only
// decoding rows (each stream's next token plus the drafts it verifies; prefill chunks are another
// form and are not recorded) and each draft it asks for; Costs turns that into the relative cost
// of verifying k more drafted tokens.
//
// Estimates: each row count seen costs the median of its last kWindow observed steps (a median,
// so one preempted step does not skew it). A plain step (1 row) costs its median. A step of
// several rows costs the least-squares line through the medians of the counts >= 2 seen (slope
// >= 0): each count's few samples inform every length, and the lengths a pacer rarely tries are
// not decided by one noisy sample. Once any such count is settled (kSettled observations), only
// settled counts make the line: the first step of a new row count pays one-time costs (the
// first 6-row step of a linear-elu run took 1.35-1.58 ms, its 2-row steps ~80 us), and a count
// the pacer then stopped trying would keep that price for good. With one count in the line, rows
// below it lie on the line from the plain step to it, rows above cost what it does (optimistic on
// purpose: an unseen length looks cheap, so it is tried and measured; the first extra row of a
// verification costs most and those after it little, so a slope from the first would overstate long
// drafts for good). With only plain steps seen, several rows cost what one does. Never less than a
// plain step, nor, below the smallest count seen, less than in proportion to its rows. Drafting
// costs the median seconds per drafted token of the last kWindow drafts.
//
// Owns its observations (kMaxRows x kWindow doubles at most). Value type; not thread-safe (the
// engine loop's thread, or a benchmark's); never fails.
#ifndef FLATSTATE_ENGINE_SPECULATE_STEP_COST_H_
#define FLATSTATE_ENGINE_SPECULATE_STEP_COST_H_

#include <vector>

namespace flatstate {

class StepCostModel {
 public:
  static constexpr int kMaxRows = 512;  // steps of more rows are not recorded
  static constexpr int kWindow = 7;     // observations kept per row count (and of drafting)
  // A row count is settled once observed this often; while any count of several rows is, only
  // settled ones shape the line (a median of three outvotes one slow first step).
  static constexpr int kSettled = 3;

  // A step that ran `rows` decoding rows took `seconds` (ignored unless 1 <= rows <= kMaxRows and
  // seconds > 0).
  void ObserveStep(int rows, double seconds);
  // Drafting `tokens` (> 0) took `seconds` (>= 0).
  void ObserveDraft(int tokens, double seconds);

  // The cost of verifying k = 0..max_extra drafted tokens in a step of `base_rows` decoding rows
  // shared by `streams` streams, in the drafting stream's tokens: cost[k] = 1 + streams *
  // (T(base_rows + k) - T(base_rows) + k * draft) / T(base_rows), so cost[0] = 1. The extra time
  // counts once per stream because every stream of the step waits for it: a draft pays when the
  // tokens it is expected to add exceed cost[k] - 1. Empty when no step has been observed (the
  // pacer then assumes its prior).
  std::vector<double> Costs(int base_rows, int streams, int max_extra) const;

  // The estimated seconds of a step of `rows` rows (> 0); 0 when no step has been observed.
  double StepSeconds(int rows) const;

 private:
  static double Median(std::vector<double> v);
  static void Push(std::vector<double>* ring, int* next, double v);

  std::vector<std::vector<double>> recent_;  // per row count: the last kWindow (ring)
  std::vector<int> next_;                    // per row count: the ring's next slot
  std::vector<double> median_;               // per row count: the median of recent_
  std::vector<int> observed_;                // the row counts observed, ascending
  std::vector<double> draft_recent_;         // seconds per drafted token (ring)
  int draft_next_ = 0;
  double draft_median_ = 0;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SPECULATE_STEP_COST_H_
