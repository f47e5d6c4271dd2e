// Issue 12's cluster contract through real processes (redis-server, flatstate-server replicas,
// nginx): a session continues on another replica after its owner is SIGKILLed, bitwise equal to
// an uninterrupted run; a turn cut by a kill mid-stream, retried, equals the uninterrupted turn.
// docs/cluster.md, "Failover".
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/system/cluster_test_util.h"

namespace flatstate::testing {
namespace {

struct Case {
  const char* model;
  uint64_t seed;  // 0: greedy
};

class ClusterFailoverTest : public ::testing::TestWithParam<Case> {};

const char* const kPrompts[] = {"To be, or not", " to be: that is", " the question"};

// The three turns of kPrompts on one replica, never interrupted.
std::vector<std::vector<int32_t>> Uninterrupted(pb::Inference::Stub* stub, const Case& c,
                                                uint32_t n) {
  const std::string s = NewSession(stub, c.model, c.seed);
  std::vector<std::vector<int32_t>> out;
  for (const char* p : kPrompts) {
    StreamResult r = Turn(stub, s, p, n);
    EXPECT_TRUE(r.status.ok()) << r.status.error_message();
    out.push_back(r.tokens);
  }
  return out;
}

TEST_P(ClusterFailoverTest, SigkillBetweenTurnsContinuesExactlyOnTheOtherReplica) {
  Cluster cluster(2, /*proxy=*/true);
  if (!cluster.available()) GTEST_SKIP() << cluster.skip_reason();
  const Case c = GetParam();
  const auto expected = Uninterrupted(cluster.replica(0).stub(), c, 12);

  const std::string s = NewSession(cluster.proxy(), c.model, c.seed);
  StreamResult t1 = Turn(cluster.proxy(), s, kPrompts[0], 12);
  ASSERT_TRUE(t1.status.ok()) << t1.status.error_message();
  EXPECT_EQ(t1.tokens, expected[0]);
  const int owner = cluster.LastUpstreamOf(s, 1);
  ASSERT_GE(owner, 0) << "nginx's access log does not name the replica of session " << s;
  cluster.replica(owner).Kill();

  const auto killed_at = std::chrono::steady_clock::now();
  StreamResult t2 = Turn(cluster.proxy(), s, kPrompts[1], 12);
  const double failover_ms = std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - killed_at)
                                 .count();
  ASSERT_TRUE(t2.status.ok()) << t2.status.error_message();
  EXPECT_EQ(cluster.LastUpstreamOf(s, 2), 1 - owner);
  EXPECT_EQ(t2.tokens, expected[1]) << "turn 2 after failover differs";
  StreamResult t3 = Turn(cluster.proxy(), s, kPrompts[2], 12);
  ASSERT_TRUE(t3.status.ok()) << t3.status.error_message();
  EXPECT_EQ(t3.tokens, expected[2]);
  std::printf("[cluster] %s seed %llu: kill -> turn 2 complete through the proxy in %.1f ms\n",
              c.model, static_cast<unsigned long long>(c.seed), failover_ms);
}

TEST_P(ClusterFailoverTest, TurnCutByAKillMidStreamIsReplayedExactly) {
  Cluster cluster(2, /*proxy=*/true);
  if (!cluster.available()) GTEST_SKIP() << cluster.skip_reason();
  const Case c = GetParam();
  constexpr uint32_t kLong = 400;
  const auto expected = Uninterrupted(cluster.replica(0).stub(), c, kLong);

  const std::string s = NewSession(cluster.proxy(), c.model, c.seed);
  ASSERT_TRUE(Turn(cluster.proxy(), s, kPrompts[0], kLong).status.ok());
  const int owner = cluster.LastUpstreamOf(s, 1);
  ASSERT_GE(owner, 0);
  bool killed = false;
  StreamResult cut = Turn(cluster.proxy(), s, kPrompts[1], kLong,
                          [&](const std::vector<int32_t>& so_far) {
                            if (!killed && so_far.size() >= 20) {
                              cluster.replica(owner).Kill();
                              killed = true;
                            }
                          });
  ASSERT_TRUE(killed) << "the turn ended before 20 tokens";
  EXPECT_FALSE(cut.status.ok());
  std::printf("[cluster] mid-stream kill: the client saw %d (%s) after %zu tokens\n",
              static_cast<int>(cut.status.error_code()), cut.status.error_message().c_str(),
              cut.tokens.size());
  ASSERT_LT(cut.tokens.size(), kLong);
  // The tokens the cut stream sent are the uninterrupted turn's first ones.
  ASSERT_TRUE(std::equal(cut.tokens.begin(), cut.tokens.end(), expected[1].begin()));

  // Retry the same turn: the dead replica's lease expires on its own (--session_lease=2s).
  StreamResult retry;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  do {
    retry = Turn(cluster.proxy(), s, kPrompts[1], kLong);
    if (retry.status.error_code() != grpc::StatusCode::ABORTED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (std::chrono::steady_clock::now() < deadline);
  ASSERT_TRUE(retry.status.ok()) << retry.status.error_code() << " "
                                 << retry.status.error_message();
  EXPECT_EQ(retry.tokens, expected[1]) << "the replayed turn differs";
  StreamResult next = Turn(cluster.proxy(), s, kPrompts[2], kLong);
  ASSERT_TRUE(next.status.ok());
  EXPECT_EQ(next.tokens, expected[2]);
}

INSTANTIATE_TEST_SUITE_P(Models, ClusterFailoverTest,
                         ::testing::Values(Case{kLinear, 7}, Case{kSoftmax, 0}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.seed != 0 ? "Seeded_" : "Greedy_") +
                                  (std::string(i.param.model) == kLinear ? "Linear" : "Softmax");
                         });

}  // namespace
}  // namespace flatstate::testing
