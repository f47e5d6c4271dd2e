// SamplingOverride: a call's own sampling params on a named session, for that call only
// (server/loop/sampling_override.h).
#include "server/loop/sampling_override.h"

#include "gtest/gtest.h"

namespace flatstate::server {
namespace {

void ExpectSameParams(const SamplingParams& a, const SamplingParams& b) {
  EXPECT_EQ(a.temperature, b.temperature);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.top_p, b.top_p);
  EXPECT_EQ(a.seed, b.seed);
}

TEST(SamplingOverrideTest, ApplyInstallsTheCallsParamsSeededAndRestorePutsTheSessionsBack) {
  SessionState s;
  s.sampling = SamplingParams{0.5f, 4, 0.9f, 1};
  s.rng.Seed(1);
  s.rng.Next();  // the session's RNG has advanced: Restore must bring back this exact state
  const Rng session_rng = s.rng;
  const SamplingParams call{1.5f, 0, 0.5f, 42};

  SamplingOverride o;
  o.Apply(&s, call);
  ExpectSameParams(s.sampling, call);
  EXPECT_TRUE(s.rng == Rng(42));  // seeded with the call's seed, not the session's state
  s.rng.Next();                   // the call's stream draws
  s.sampling.temperature = 9.f;

  o.Restore(&s);
  ExpectSameParams(s.sampling, SamplingParams{0.5f, 4, 0.9f, 1});
  EXPECT_TRUE(s.rng == session_rng);
}

TEST(SamplingOverrideTest, RestoreWithoutApplyChangesNothing) {
  SessionState s;
  s.sampling = SamplingParams{0.7f, 3, 0.8f, 5};
  s.rng.Seed(5);
  s.rng.Next();
  const Rng before = s.rng;
  SamplingOverride o;
  o.Restore(&s);
  ExpectSameParams(s.sampling, SamplingParams{0.7f, 3, 0.8f, 5});
  EXPECT_TRUE(s.rng == before);
}

}  // namespace
}  // namespace flatstate::server
