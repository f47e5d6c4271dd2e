#include "engine/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flatstate {
namespace {

double Clean(float x) {
  return std::isnan(x) ? -std::numeric_limits<double>::infinity() : static_cast<double>(x);
}

}  // namespace

TokenLogprobs ComputeLogprobs(const float* logits, int vocab, int32_t token, int top) {
  TokenLogprobs out;
  out.token = token;
  if (vocab <= 0) return out;
  double max = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < vocab; ++i) max = std::max(max, Clean(logits[i]));
  double sum = 0.0;
  if (std::isfinite(max)) {
    for (int i = 0; i < vocab; ++i) sum += std::exp(Clean(logits[i]) - max);
  }
  const double log_z = std::isfinite(max) ? max + std::log(sum) : 0.0;
  auto lp = [&](int32_t t) {
    return static_cast<float>(std::isfinite(max) ? Clean(logits[t]) - log_z
                                                 : -std::numeric_limits<double>::infinity());
  };
  if (token >= 0 && token < vocab) out.logprob = lp(token);
  const int k = std::min(top, vocab);
  if (k > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) ids[static_cast<size_t>(i)] = i;
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      const double la = Clean(logits[a]), lb = Clean(logits[b]);
      return la > lb || (la == lb && a < b);
    });
    for (int i = 0; i < k; ++i)
      out.top.emplace_back(ids[static_cast<size_t>(i)], lp(ids[static_cast<size_t>(i)]));
  }
  return out;
}

}  // namespace flatstate
