// Log-probabilities of a token under a step's raw logits: what an OpenAI-style `logprobs` field
// reports. Computed on the host from the logits the forward pass returns, so the same on every
// device. They describe the model's distribution (log-softmax of the raw logits), not the
// sampling distribution after temperature / top-k / top-p.
//
// Pure functions; thread-safe. Never fail: NaN logits count as -inf.
#ifndef FLATSTATE_ENGINE_SAMPLING_LOGPROBS_H_
#define FLATSTATE_ENGINE_SAMPLING_LOGPROBS_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace flatstate {

struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0.f;  // log-softmax(logits)[token]
  // The `top` most likely tokens, most likely first (ties: lower id first).
  std::vector<std::pair<int32_t, float>> top;
};

// log-softmax of `logits` (length `vocab`) at `token`, and the `top` most likely tokens with
// theirs (top <= 0: none; at most vocab). Accumulates in double.
TokenLogprobs ComputeLogprobs(const float* logits, int vocab, int32_t token, int top);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SAMPLING_LOGPROBS_H_
