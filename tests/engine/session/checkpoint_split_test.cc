// The split checkpoint form that shared session stores write incrementally: joined again it is
// byte-identical to SerializeSession; a split from a later token holds exactly the later chunks of
// the full split; the head alone carries no payload.
#include <string>
#include <vector>

#include "engine/session/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/engine/session/checkpoint_test_util.h"

namespace flatstate::testing {
namespace {

TEST(CheckpointSplitTest, LinearHeadIsTheWholeCheckpoint) {
  const CheckpointModel m = LinearModel();
  const SessionState st = RandomLinearState(m);
  absl::StatusOr<CheckpointSplit> split = SerializeSessionSplit(m, st, nullptr, 7, 0);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->chunk_tokens, 0);
  EXPECT_TRUE(split->chunks.empty());
  EXPECT_EQ(split->head, *SerializeSession(m, st, nullptr));
  EXPECT_EQ(*JoinCheckpoint(split->head, 0, {}), split->head);
  const std::vector<std::string> stray = {"x"};
  EXPECT_EQ(JoinCheckpoint(split->head, 0, stray).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointSplitTest, SoftmaxJoinIsByteIdenticalForEveryChunkSize) {
  SoftmaxFixture f;  // 13 tokens
  for (int64_t chunk : {1, 2, 5, 13, 100}) {
    absl::StatusOr<CheckpointSplit> split =
        SerializeSessionSplit(f.model, f.state, &f.pool, chunk, 0);
    ASSERT_TRUE(split.ok()) << split.status();
    EXPECT_EQ(split->total_chunks, (13 + chunk - 1) / chunk);
    EXPECT_EQ(split->first_chunk, 0);
    ASSERT_EQ(static_cast<int64_t>(split->chunks.size()), split->total_chunks);
    absl::StatusOr<std::string> joined = JoinCheckpoint(split->head, chunk, split->chunks);
    ASSERT_TRUE(joined.ok());
    EXPECT_EQ(*joined, f.blob) << "chunk " << chunk;
    // The head is the blob's prefix: everything up to the payload.
    EXPECT_EQ(f.blob.compare(0, split->head.size(), split->head), 0);
  }
}

TEST(CheckpointSplitTest, SoftmaxSplitFromALaterTokenHoldsOnlyTheLaterChunks) {
  SoftmaxFixture f;
  absl::StatusOr<CheckpointSplit> full = SerializeSessionSplit(f.model, f.state, &f.pool, 4, 0);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(full->total_chunks, 4);  // 4 + 4 + 4 + 1 tokens
  for (int64_t first_token : {0, 3, 4, 9, 12, 13, 50}) {
    absl::StatusOr<CheckpointSplit> part =
        SerializeSessionSplit(f.model, f.state, &f.pool, 4, first_token);
    ASSERT_TRUE(part.ok());
    EXPECT_EQ(part->head, full->head);
    EXPECT_EQ(part->first_chunk, std::min<int64_t>(first_token / 4, 4));
    EXPECT_EQ(part->total_chunks, 4);
    const std::vector<std::string> tail(full->chunks.begin() + part->first_chunk,
                                        full->chunks.end());
    EXPECT_EQ(part->chunks, tail) << "first_token " << first_token;
  }
  EXPECT_EQ(SerializeSessionSplit(f.model, f.state, &f.pool, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointSplitTest, MissingOrExtraChunksDoNotRestore) {
  SoftmaxFixture f;
  absl::StatusOr<CheckpointSplit> split = SerializeSessionSplit(f.model, f.state, &f.pool, 4, 0);
  ASSERT_TRUE(split.ok());
  std::vector<std::string> fewer(split->chunks.begin(), split->chunks.end() - 1);
  std::vector<std::string> more = split->chunks;
  more.push_back(split->chunks[0]);
  for (const auto* chunks : {&fewer, &more}) {
    absl::StatusOr<std::string> joined = JoinCheckpoint(split->head, 4, *chunks);
    ASSERT_TRUE(joined.ok());
    KvBlockPool dst(16, 4, 2, 8);
    SessionState out = Sentinel();
    EXPECT_EQ(RestoreSession(f.model, *joined, &dst, &out).code(), absl::StatusCode::kDataLoss);
    ExpectSentinel(out);
  }
}

TEST(CheckpointSplitTest, KvChunkTokensIsAboutOneMebibyte) {
  ModelConfig c = SoftmaxModel().config;
  c.num_hidden_layers = 4;
  c.hidden_size = 128;  // 4 KiB per token
  EXPECT_EQ(KvChunkTokens(c), 256);
  c.hidden_size = 1 << 20;  // 32 MiB per token
  EXPECT_EQ(KvChunkTokens(c), 1);
}

}  // namespace
}  // namespace flatstate::testing
