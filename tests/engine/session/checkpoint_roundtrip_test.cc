// Checkpoint round trips: linear states of every kind and softmax KV caches serialise and
// restore bit for bit (into another pool too); the header alone; what serialising rejects.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/session/checkpoint.h"
#include "gtest/gtest.h"
#include "tests/engine/session/checkpoint_test_util.h"

namespace flatstate::testing {
namespace {

void ExpectSameState(const SessionState& a, const SessionState& b) {
  EXPECT_EQ(a.position, b.position);
  EXPECT_EQ(a.pending, b.pending);
  EXPECT_EQ(a.sampling.temperature, b.sampling.temperature);
  EXPECT_EQ(a.sampling.top_k, b.sampling.top_k);
  EXPECT_EQ(a.sampling.top_p, b.sampling.top_p);
  EXPECT_EQ(a.sampling.seed, b.sampling.seed);
  EXPECT_EQ(a.rng, b.rng);
  ASSERT_EQ(a.linear.size(), b.linear.size());
  EXPECT_EQ(std::memcmp(a.linear.data(), b.linear.data(), a.linear.size() * sizeof(float)), 0);
}

TEST(CheckpointTest, LinearRoundTrip) {
  for (AttentionKind kind :
       {AttentionKind::kFavor, AttentionKind::kLinearElu, AttentionKind::kCosformer,
        AttentionKind::kCosine, AttentionKind::kGated, AttentionKind::kWindow,
        AttentionKind::kHybrid}) {
    const CheckpointModel m = LinearModel(kind);
    const SessionState st = RandomLinearState(m);
    absl::StatusOr<std::string> blob = SerializeSession(m, st, nullptr);
    ASSERT_TRUE(blob.ok()) << blob.status();
    SessionState out = Sentinel();
    ASSERT_TRUE(RestoreSession(m, *blob, nullptr, &out).ok());
    ExpectSameState(st, out);
    EXPECT_TRUE(out.kv_blocks.empty());
    // The restored rng continues exactly where the original would.
    Rng a = st.rng, b = out.rng;
    EXPECT_EQ(a.Next(), b.Next());
    // Serialising the restored state gives the same bytes.
    EXPECT_EQ(*SerializeSession(m, out, nullptr), *blob);
  }
}

TEST(CheckpointTest, TextTailRoundTripsAndIsBounded) {
  const CheckpointModel m = LinearModel();
  SessionState st = RandomLinearState(m);
  st.text_tail = "\xE2\x9C";  // first two bytes of U+2713
  absl::StatusOr<std::string> blob = SerializeSession(m, st, nullptr);
  ASSERT_TRUE(blob.ok()) << blob.status();
  SessionState out = Sentinel();
  ASSERT_TRUE(RestoreSession(m, *blob, nullptr, &out).ok());
  EXPECT_EQ(out.text_tail, st.text_tail);
  st.text_tail = "\x01\xF0\x9F\x98\x80xyz";  // 8 bytes: a text tokenizer's decoder state
  blob = SerializeSession(m, st, nullptr);
  ASSERT_TRUE(blob.ok()) << blob.status();
  ASSERT_TRUE(RestoreSession(m, *blob, nullptr, &out).ok());
  EXPECT_EQ(out.text_tail, st.text_tail);
  st.text_tail = "abcdefghi";  // 9 bytes
  EXPECT_EQ(SerializeSession(m, st, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, FavorKeepsMinusInfinityStabiliser) {
  const CheckpointModel m = LinearModel(AttentionKind::kFavor);
  const SessionState st = RandomLinearState(m);
  SessionState out;
  ASSERT_TRUE(RestoreSession(m, *SerializeSession(m, st, nullptr), nullptr, &out).ok());
  const LayerStateLayout l = MakeStateLayout(m.config).layers[0];
  for (size_t i = l.m; i < l.conv; ++i) {
    EXPECT_TRUE(std::isinf(out.linear[i]) && out.linear[i] < 0) << i;
  }
  for (float x : out.linear) EXPECT_FALSE(std::isnan(x));
}

TEST(CheckpointTest, HeaderOnly) {
  const CheckpointModel m = LinearModel();
  const std::string blob = *SerializeSession(m, RandomLinearState(m), nullptr);
  absl::StatusOr<CheckpointHeader> h = ReadCheckpointHeader(blob);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, kCheckpointVersion);
  EXPECT_EQ(h->fingerprint, kFingerprint);
  EXPECT_EQ(h->attention_kind, AttentionKind::kFavor);
  EXPECT_EQ(h->context_tokens, 37 + 3);
  EXPECT_EQ(ReadCheckpointHeader(blob.substr(0, 30)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(ReadCheckpointHeader("garbage that is not a checkpoint").status().code(),
            absl::StatusCode::kDataLoss);
}

void ExpectRows(const KvBlockPool& a, const std::vector<int32_t>& ta, const KvBlockPool& b,
                const std::vector<int32_t>& tb, int64_t tokens) {
  for (int64_t t = 0; t < tokens; ++t) {
    for (int l = 0; l < a.num_layers(); ++l) {
      const int sa = t % a.block_size(), sb = t % b.block_size();
      const int32_t ba = ta[t / a.block_size()], bb = tb[t / b.block_size()];
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<float> ra(a.hidden()), rb(b.hidden());
        a.ReadRow(ba, l, kv, sa, ra.data());
        b.ReadRow(bb, l, kv, sb, rb.data());
        ASSERT_EQ(ra, rb) << "t=" << t << " l=" << l << " kv=" << kv;
      }
    }
  }
}

TEST(CheckpointTest, SoftmaxRoundTripIntoAnotherPool) {
  SoftmaxFixture f;
  // Different block size and a non-empty pool.
  KvBlockPool dst(10, 3, 2, 8);
  std::vector<int32_t> taken;
  ASSERT_TRUE(dst.Reserve(&taken, 4).ok());
  const int free_before = dst.blocks_free();
  SessionState out = Sentinel();
  absl::Status s = RestoreSession(f.model, f.blob, &dst, &out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out.position, 13);
  EXPECT_EQ(out.pending, (std::vector<int32_t>{7}));
  EXPECT_EQ(out.rng, f.state.rng);
  EXPECT_TRUE(out.linear.empty());
  EXPECT_EQ(out.kv_blocks.size(), 5u);  // ceil(13 / 3)
  EXPECT_EQ(dst.blocks_free(), free_before - 5);
  ExpectRows(f.pool, f.state.kv_blocks, dst, out.kv_blocks, 13);
  // And back: serialising from the new pool gives the same payload bytes as before.
  absl::StatusOr<std::string> again = SerializeSession(f.model, out, &dst);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->size(), f.blob.size());
}

TEST(CheckpointTest, SoftmaxEmptyContext) {
  SoftmaxFixture f(/*position=*/0);
  KvBlockPool dst(1, 4, 2, 8);
  SessionState out;
  ASSERT_TRUE(RestoreSession(f.model, f.blob, &dst, &out).ok());
  EXPECT_EQ(out.position, 0);
  EXPECT_TRUE(out.kv_blocks.empty());
  EXPECT_EQ(dst.blocks_free(), 1);
}

TEST(CheckpointTest, SoftmaxPoolTooSmall) {
  SoftmaxFixture f;
  KvBlockPool dst(5, 4, 2, 8);
  std::vector<int32_t> taken;
  ASSERT_TRUE(dst.Reserve(&taken, 8).ok());  // 2 used, 3 free; restore needs 4
  SessionState out = Sentinel();
  absl::Status s = RestoreSession(f.model, f.blob, &dst, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(dst.blocks_free(), 3);
  ExpectSentinel(out);
}

TEST(CheckpointTest, SoftmaxNeedsMatchingPool) {
  SoftmaxFixture f;
  SessionState out;
  EXPECT_EQ(RestoreSession(f.model, f.blob, nullptr, &out).code(),
            absl::StatusCode::kInvalidArgument);
  KvBlockPool wrong(8, 4, 3, 8);
  EXPECT_EQ(RestoreSession(f.model, f.blob, &wrong, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.blocks_free(), 8);
  EXPECT_EQ(SerializeSession(f.model, f.state, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  SessionState short_table = f.state;
  short_table.kv_blocks.resize(2);
  EXPECT_EQ(SerializeSession(f.model, short_table, &f.pool).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, SerializeRejectsWrongLinearSize) {
  const CheckpointModel m = LinearModel();
  SessionState st = RandomLinearState(m);
  st.linear.pop_back();
  EXPECT_EQ(SerializeSession(m, st, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
}


}  // namespace
}  // namespace flatstate::testing
