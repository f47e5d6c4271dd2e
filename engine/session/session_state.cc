#include "engine/session/session_state.h"

#include <algorithm>
#include <limits>

namespace flatstate {

LinearStateLayout LinearLayout(const ModelConfig& config) {
  LinearStateLayout l;
  if (!config.is_linear()) return l;  // softmax: no recurrent state
  const size_t h = config.num_attention_heads, f = config.feature_dim(), hd = config.head_dim;
  const size_t k = config.conv_kernel_size, d = config.hidden_size;
  l.s = 0;
  l.z = h * f * hd;
  l.m = l.z + h * f;
  l.conv = l.m + h;
  l.per_layer = l.conv + (k > 1 ? (k - 1) * d : 0);
  return l;
}

SessionState NewSessionState(const ModelConfig& config, const SamplingParams& sampling) {
  SessionState st;
  st.sampling = sampling;
  st.rng.Seed(sampling.seed);
  if (!config.is_linear()) return st;
  const LinearStateLayout l = LinearLayout(config);
  st.linear.assign(l.per_layer * config.num_hidden_layers, 0.f);
  if (config.attention_kind == AttentionKind::kFavor) {
    const size_t h = config.num_attention_heads;
    for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
      float* m = st.linear.data() + layer * l.per_layer + l.m;
      std::fill(m, m + h, -std::numeric_limits<float>::infinity());
    }
  }
  return st;
}

}  // namespace flatstate
