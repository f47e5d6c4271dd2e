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
      const StateLayout layout = MakeStateLayout(c);
      ASSERT_EQ(layout.layers.size(), 3u);
      const size_t h = 2, f = c.feature_dim(), hd = 8;
      for (size_t i = 0; i < 3; ++i) {
        const LayerStateLayout& l = layout.layers[i];
        EXPECT_EQ(l.begin, i * l.floats);
        EXPECT_EQ(l.s, 0u);
        EXPECT_EQ(l.z, h * f * hd);
        EXPECT_EQ(l.m, l.z + h * f);
        EXPECT_EQ(l.conv, l.m + h);
        EXPECT_EQ(l.floats, l.conv + (conv > 1 ? size_t(conv - 1) * 16 : 0));
      }
      EXPECT_EQ(layout.floats, c.state_floats());
    }
  }
}

// docs/kinds.md's table: the parts of every layer and their order for the new kinds.
TEST(SessionStateTest, LayoutOfGatedWindowAndHybrid) {
  const size_t h = 2, hd = 8, D = 16, K = 4, W = 5;
  ModelConfig gated = Config(AttentionKind::kGated, K);
  gated.rfa_num_features = 3;  // F = 6
  StateLayout l = MakeStateLayout(gated);
  EXPECT_EQ(l.layers[1].begin, h * 6 * hd + h * 6 + h + (K - 1) * D);
  EXPECT_EQ(l.layers[1].conv, h * 6 * hd + h * 6 + h);
  EXPECT_EQ(l.floats, gated.state_floats());

  ModelConfig window = Config(AttentionKind::kWindow, 0);
  window.window_size = W;
  l = MakeStateLayout(window);
  EXPECT_TRUE(l.layers[2].attention.window && !l.layers[2].attention.linear);
  EXPECT_EQ(l.layers[2].ring_k, 0u);
  EXPECT_EQ(l.layers[2].ring_v, W * D);
  EXPECT_EQ(l.layers[2].begin, 2 * 2 * W * D);
  EXPECT_EQ(l.floats, 3 * 2 * W * D);
  EXPECT_EQ(l.floats, window.state_floats());

  ModelConfig hybrid = Config(AttentionKind::kHybrid, K);
  hybrid.window_size = W;
  l = MakeStateLayout(hybrid);  // alternate: window, linear, window
  const size_t win = (K - 1) * D + 2 * W * D, lin = h * hd * hd + h * hd + h + (K - 1) * D;
  EXPECT_EQ(l.layers[0].ring_k, (K - 1) * D);
  EXPECT_EQ(l.layers[0].floats, win);
  EXPECT_EQ(l.layers[1].begin, win);
  EXPECT_EQ(l.layers[1].conv, h * hd * hd + h * hd + h);
  EXPECT_EQ(l.layers[1].floats, lin);
  EXPECT_EQ(l.layers[2].begin, win + lin);
  EXPECT_EQ(l.floats, 2 * win + lin);
  EXPECT_EQ(l.floats, hybrid.state_floats());

  hybrid.hybrid_layout = HybridLayout::kSum;
  l = MakeStateLayout(hybrid);
  EXPECT_EQ(l.layers[1].ring_k, h * hd * hd + h * hd + h + (K - 1) * D);
  EXPECT_EQ(l.floats, 3 * (lin + 2 * W * D));
}

TEST(SessionStateTest, NewStateZeroedWithStabiliser) {
  const SamplingParams sp{.temperature = 0.5f, .top_k = 3, .top_p = 0.9f, .seed = 77};
  for (AttentionKind kind : {AttentionKind::kLinearElu, AttentionKind::kFavor}) {
    const ModelConfig c = Config(kind, 4);
    const SessionState st = NewSessionState(c, sp);
    const StateLayout layout = MakeStateLayout(c);
    const LayerStateLayout& l = layout.layers[0];
    EXPECT_EQ(st.position, 0);
    EXPECT_TRUE(st.pending.empty());
    EXPECT_TRUE(st.kv_blocks.empty());
    EXPECT_EQ(st.sampling.seed, 77u);
    EXPECT_EQ(st.rng, Rng(77));
    ASSERT_EQ(st.linear.size(), l.floats * 3);
    for (size_t i = 0; i < st.linear.size(); ++i) {
      const size_t off = i % l.floats;
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
  EXPECT_TRUE(MakeStateLayout(c).layers.empty());
  EXPECT_EQ(c.state_floats(), 0u);
}

}  // namespace
}  // namespace flatstate
