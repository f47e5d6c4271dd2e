// BucketDraw: SampleToken's plain temperature draw (no top-k, top-p = 1) without sorting every
// candidate, when it can prove which token the sorted draw picks.
//
// The draw SampleToken defines (sampler.h): the candidates sorted by (logit desc, id asc), their
// SamplerExp weights summed in that order in double (cum_i after the i-th, total after all),
// r = u * total, and the first i with r < cum_i. Sorting is most of its cost at a large
// vocabulary (a random 65,536-token model's flat distribution keeps every token a candidate:
// ~0.33 of ~0.5 ms a draw, docs/benchmarks.md). BucketDraw instead:
//   1. weighs every candidate (the same SamplerExp weights, computed in token order) and puts it
//      in one of 4096 buckets that split the candidates' range of scaled gaps
//      g = (logit - max) / temperature evenly, b = floor(-g * 4095 / -lowest g): a monotone
//      function of the sort order (a token before another is never in a later bucket), summing
//      each bucket's weights;
//   2. walks the buckets in order to the one where the running sum passes u * total, sorts only
//      that bucket's candidates (more than 4096 of them, a run of tied logits: it declines) and
//      walks them to the token t where it passes;
//   3. returns t only when u * total lies farther from both of t's boundaries (the running sum
//      before and after t) than the rounding of either computation can move them. Both are sums
//      of at most n <= 2^20 of the same non-negative doubles in some order, so each partial sum
//      is within n * 2^-53 / (1 - n * 2^-53) < 2^-32.99 of the total from the exact sum of its
//      terms (Higham, Accuracy and Stability of Numerical Algorithms, 4.2); with the product
//      u * total rounded once more, the four errors on either side add to under 2^-30.9 of the
//      total, and the margin asked is 2^-29 of it. Otherwise it returns -1 and the caller sorts:
//      the result is SampleToken's in every case, bit for bit (sampler_test compares SampleToken
//      with a full sort on every shape; bucket_draw_test compares BucketDraw with the sorted draw
//      and puts u on exact boundaries to take the -1 path).
// How often it declines: u * total falls within 2^-29 of the total of one of n equally likely
// tokens' boundaries with probability n * 2^-28 (2.4e-4 at 65,536 tokens); measured over 200,000
// draws of the Sample/ benchmark's logits, 43 declines at 65,536 tokens and 201 at 248,320
// (docs/data/zen5-2026-11-28c/bucket_decline.txt).
//
// Not thread-safe (the scratch is one thread's); never fails.
#ifndef FLATSTATE_ENGINE_SAMPLING_BUCKET_DRAW_H_
#define FLATSTATE_ENGINE_SAMPLING_BUCKET_DRAW_H_

#include <cstdint>
#include <span>
#include <vector>

namespace flatstate {

// Storage BucketDraw reuses between calls.
struct BucketDrawScratch {
  std::vector<double> weights;
  std::vector<uint16_t> bucket;
  std::vector<double> sums;
  std::vector<uint64_t> members;
};

// keys: the candidates' sort keys (sampler.cc: order << 32 | id) in any order, every one with
// a scaled gap >= kSamplerNegligibleExponent, the top token (gap 0) among them; u: the draw's
// Rng::Uniform(). Returns the token SampleToken's sorted draw picks, or -1 when the bounds above
// cannot decide (or there are more than 2^20 keys).
int32_t BucketDraw(std::span<const uint64_t> keys, double max_logit, double inv_t, float u,
                   BucketDrawScratch* scratch);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_SAMPLING_BUCKET_DRAW_H_
