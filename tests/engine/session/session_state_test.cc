#include "engine/session/session_state.h"

#include <cmath>

#include "gtest/gtest.h"

namespace flatstate {
namespace {

ModelConfig Config(AttentionKind kind, int conv) {
  ModelConfig c;
  c.attention_kind = kind;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.head_dim = 8;
  c.num_hidden_layers = 3;
  c.favor_num_features = 6;
  c.conv_kernel_size = conv;
  return c;
}

TEST(SessionStateTest, LayoutMatchesStateFloats) {
  for (AttentionKind kind : {AttentionKind::kLinearElu, AttentionKind::kCosformer,
                             AttentionKind::kCosine, AttentionKind::kFavor}) {
    for (int conv : {0, 1, 4}) {
      const ModelConfig c = Config(kind, conv);
      const LinearStateLayout l = LinearLayout(c);
      const size_t h = 2, f = c.feature_dim(), hd = 8;
      EXPECT_EQ(l.s, 0u);
      EXPECT_EQ(l.z, h * f * hd);
      EXPECT_EQ(l.m, l.z + h * f);
      EXPECT_EQ(l.conv, l.m + h);
      EXPECT_EQ(l.per_layer, l.conv + (conv > 1 ? size_t(conv - 1) * 16 : 0));
      EXPECT_EQ(l.per_layer, c.state_floats_per_layer());
    }
  }
}

TEST(SessionStateTest, NewStateZeroedWithStabiliser) {
  const SamplingParams sp{.temperature = 0.5f, .top_k = 3, .top_p = 0.9f, .seed = 77};
  for (AttentionKind kind : {AttentionKind::kLinearElu, AttentionKind::kFavor}) {
    const ModelConfig c = Config(kind, 4);
    const SessionState st = NewSessionState(c, sp);
    const LinearStateLayout l = LinearLayout(c);
    EXPECT_EQ(st.position, 0);
    EXPECT_TRUE(st.pending.empty());
    EXPECT_TRUE(st.kv_blocks.empty());
    EXPECT_EQ(st.sampling.seed, 77u);
    EXPECT_EQ(st.rng, Rng(77));
    ASSERT_EQ(st.linear.size(), l.per_layer * 3);
    for (size_t i = 0; i < st.linear.size(); ++i) {
      const size_t off = i % l.per_layer;
      if (kind == AttentionKind::kFavor && off >= l.m && off < l.conv) {
        EXPECT_TRUE(std::isinf(st.linear[i]) && st.linear[i] < 0) << i;
      } else {
        EXPECT_EQ(st.linear[i], 0.f) << i;
      }
    }
  }
}

TEST(SessionStateTest, SoftmaxHasNoLinearState) {
  ModelConfig c = Config(AttentionKind::kSoftmax, 0);
  const SessionState st = NewSessionState(c, {});
  EXPECT_TRUE(st.linear.empty());
  EXPECT_EQ(LinearLayout(c).per_layer, 0u);
}

}  // namespace
}  // namespace flatstate
