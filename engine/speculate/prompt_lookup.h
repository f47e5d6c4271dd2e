// PromptLookupDrafter: speculative decoding's drafts without a second model (prompt lookup, or
// n-gram drafting): after the context's last n tokens, propose the tokens that followed their
// most recent earlier occurrence in the context (the request's prompt and what it generated), for
// n from max_ngram down to min_ngram. Text that quotes or edits its prompt (code edits, summaries,
// extraction) repeats long runs, which drafts of several tokens catch; the engine verifies them
// (StepRequest::draft, engine/runtime/engine.h), so a wrong draft costs time, never a changed
// output.
//
// Adaptive: the draft's length and pauses after misses follow DraftPacer (draft_pacer.h).
//
// Owns the token history it was fed and, per n, an index of each n-gram's most recent end
// (memory linear in the history: about 3 entries per token). Draft is O(max_ngram) hash lookups
// plus the draft's length. Not thread-safe (one stream owns it); never fails.
#ifndef FLATSTATE_ENGINE_SPECULATE_PROMPT_LOOKUP_H_
#define FLATSTATE_ENGINE_SPECULATE_PROMPT_LOOKUP_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "engine/speculate/draft_pacer.h"
#include "engine/speculate/drafter.h"

namespace flatstate {

struct PromptLookupOptions {
  int max_draft = 5;  // tokens per draft (>= 1)
  int min_ngram = 2;  // the shortest suffix that may match (>= 1)
  int max_ngram = 4;  // the longest tried first (>= min_ngram)
};

class PromptLookupDrafter : public Drafter {
 public:
  // Out-of-range options are clamped (max_draft >= 1, 1 <= min_ngram <= max_ngram <= 16).
  explicit PromptLookupDrafter(const PromptLookupOptions& options);

  // Appends tokens to the context (the prompt, then each token the stream emits, in order).
  void Append(std::span<const int32_t> tokens) override;
  // The draft to verify after the current context: at most the pacer's length for `limit` and
  // `cost` (DraftPacer::Next) tokens; empty when no suffix recurs or the pacer proposes none.
  std::vector<int32_t> Draft(int limit, std::span<const double> cost) override;
  // What the engine made of the last draft (DraftPacer::Feedback).
  void Feedback(int drafted, int accepted) override;
  std::unique_ptr<Drafter> Clone() override;

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }

 private:
  uint64_t Hash(int64_t end, int n) const;  // of tokens_[end - n, end)
  // Records the n-grams ending at `end` (<= size()) as their most recent occurrence.
  void Index(int64_t end);

  PromptLookupOptions o_;
  std::vector<int32_t> tokens_;
  std::vector<absl::flat_hash_map<uint64_t, int64_t>> last_end_;  // per n - min_ngram
  DraftPacer pacer_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SPECULATE_PROMPT_LOOKUP_H_
