// BucketDraw (engine/sampling/bucket_draw.h) against the sorted draw it stands in for: whenever
// it answers, the token is the one the sort, the in-order double sum and the first running sum
// past u * total pick; it declines (-1) where u * total sits on a boundary; and it answers the
// overwhelming majority of draws (else it would save nothing).
#include "engine/sampling/bucket_draw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/sampling/sampler.h"
#include "engine/sampling/sampler_exp.h"
#include "gtest/gtest.h"

namespace flatstate {
namespace {

struct Candidates {
  std::vector<uint64_t> keys;  // token order
  double max_logit = 0, inv_t = 1;
};

Candidates Collect(const std::vector<float>& logits, float temperature) {
  Candidates c;
  c.max_logit = -std::numeric_limits<double>::infinity();
  for (float x : logits) c.max_logit = std::max(c.max_logit, static_cast<double>(x));
  c.inv_t = 1.0 / static_cast<double>(temperature);
  for (size_t i = 0; i < logits.size(); ++i) {
    const double gap = (static_cast<double>(logits[i]) - c.max_logit) * c.inv_t;
    if (gap >= kSamplerNegligibleExponent) {
      c.keys.push_back(SortKey(logits[i], static_cast<int32_t>(i)));
    }
  }
  return c;
}

// The definition (sampler.h) for a plain draw: the candidates sorted, their weights' running
// sums in that order; Draw(u) is the first token whose running sum exceeds u * total.
class SortedDraw {
 public:
  explicit SortedDraw(const Candidates& c) : keys_(c.keys) {
    std::sort(keys_.begin(), keys_.end());
    std::vector<double> w(keys_.size());
    SamplerExpWeights(keys_.data(), keys_.size(), c.max_logit, c.inv_t, w.data());
    double sum = 0;
    for (double x : w) cum_.push_back(sum += x);
  }
  int32_t Draw(float u) const {
    const double r = static_cast<double>(u) * cum_.back();
    const size_t i =
        static_cast<size_t>(std::upper_bound(cum_.begin(), cum_.end(), r) - cum_.begin());
    return static_cast<int32_t>(keys_[std::min(i, keys_.size() - 1)] & 0xffffffffu);
  }

 private:
  std::vector<uint64_t> keys_;
  std::vector<double> cum_;
};

TEST(BucketDraw, PicksTheSortedDrawsTokenWheneverItAnswers) {
  Rng rng(5);
  BucketDrawScratch scratch;
  int answered = 0, draws = 0;
  for (int vocab : {300, 4096, 65536, 248320}) {
    for (float spread : {0.01f, 1.f, 8.f, 60.f}) {
      std::vector<float> logits(static_cast<size_t>(vocab));
      for (float& x : logits) {
        x = spread * (2.f * rng.Uniform() - 1.f);
        if (rng.Uniform() < 0.1f) x = std::round(x);  // ties across ids
      }
      for (float t : {0.2f, 0.8f, 2.f}) {
        const Candidates c = Collect(logits, t);
        const SortedDraw sorted(c);
        const int n = vocab >= 65536 ? 40 : 200;
        for (int d = 0; d < n; ++d) {
          const float u = rng.Uniform();
          const int32_t got = BucketDraw(c.keys, c.max_logit, c.inv_t, u, &scratch);
          ++draws;
          if (got < 0) continue;
          ++answered;
          ASSERT_EQ(got, sorted.Draw(u))
              << "vocab " << vocab << " spread " << spread << " t " << t << " u " << u;
        }
      }
    }
  }
  // The bounds leave a few 1e-4 of a flat draw's range undecided; nearly every draw answers.
  EXPECT_GE(answered, draws - draws / 100) << answered << " of " << draws;
}

TEST(BucketDraw, DeclinesOnAnExactBoundaryAndTheSortDecides) {
  // 1024 equal logits: every weight is exactly 1 and the running sums are exact integers, so
  // u = j / 1024 puts u * total exactly on the boundary between tokens j - 1 and j.
  const std::vector<float> logits(1024, 0.5f);
  const Candidates c = Collect(logits, 1.f);
  const SortedDraw sorted(c);
  BucketDrawScratch scratch;
  for (int j : {1, 2, 511, 512, 1000}) {
    const float u = static_cast<float>(j) / 1024.f;
    EXPECT_EQ(BucketDraw(c.keys, c.max_logit, c.inv_t, u, &scratch), -1) << j;
    EXPECT_EQ(sorted.Draw(u), j);  // r = j < cum = j + 1 first at token j
    // Half a token past the boundary both agree.
    const float mid = (static_cast<float>(j) + 0.5f) / 1024.f;
    EXPECT_EQ(BucketDraw(c.keys, c.max_logit, c.inv_t, mid, &scratch), j);
  }
}

// Through SampleToken on 65,536 tied logits: BucketDraw declines (one bucket holds them all) and
// the radix sort decides from the same u. Every draw must equal the definition driven by a copy
// of the rng, and leave the rng where it does.
TEST(BucketDraw, SampleTokenKeepsTheDefinitionOnAFlatLargeVocabulary) {
  const std::vector<float> logits(65536, 1.f);  // many exact boundaries
  SamplerScratch scratch;
  const SortedDraw sorted(Collect(logits, 0.8f));
  Rng a(11), b(11);
  for (int d = 0; d < 300; ++d) {
    const int32_t got =
        SampleToken(logits.data(), 65536, SamplingParams{0.8f, 0, 1.f, 11}, &a, &scratch);
    ASSERT_EQ(got, sorted.Draw(b.Uniform())) << d;
    ASSERT_EQ(a, b);
  }
}

}  // namespace
}  // namespace flatstate
