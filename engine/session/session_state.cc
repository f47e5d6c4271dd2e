#include "engine/session/session_state.h"

#include <algorithm>
#include <limits>

namespace flatstate {

StateLayout MakeStateLayout(const ModelConfig& config) {
  StateLayout out;
  if (!config.has_state()) return out;  // softmax: KV blocks, no fixed-size state
  const size_t h = config.num_attention_heads, f = config.feature_dim(), hd = config.head_dim;
  const size_t d = config.hidden_size, w = config.window_size;
  for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
    const size_t k = config.layer_has_conv(layer) ? config.conv_kernel_size : 0;
    LayerStateLayout l;
    l.attention = config.layer_attention(layer);
    l.begin = out.floats;
    if (l.attention.delta || l.attention.ssm || l.attention.rwkv7 || l.attention.gla) {
      // S first; then the conv window (Gated DeltaNet, Mamba-2, GLA) or RWKV's two previous rows.
      l.s = 0;
      if (l.attention.delta) {
        const DeltaNetShape& dn = config.delta;
        l.conv = size_t(dn.value_heads) * dn.key_dim * dn.value_dim;
        l.floats = dn.state_floats();
      } else if (l.attention.ssm) {
        const SsmShape& ssm = config.ssm;
        l.conv = size_t(ssm.heads) * ssm.state_size * ssm.head_dim;
        l.floats = ssm.state_floats();
      } else if (l.attention.gla) {
        const GlaShape& gla = config.gla;
        l.conv = size_t(gla.heads) * gla.key_dim * gla.value_dim;
        l.floats = gla.state_floats();
      } else {
        const Rwkv7Shape& rw = config.rwkv;
        l.conv = size_t(rw.heads) * rw.head_dim * rw.head_dim;
        l.ffn_shift = l.conv + size_t(rw.width());
        l.floats = rw.state_floats();
      }
      out.floats += l.floats;
      out.layers.push_back(l);
      continue;
    }
    size_t at = 0;
    if (l.attention.linear) {
      l.s = at;
      l.z = l.s + h * f * hd;
      l.m = l.z + h * f;
      at = l.m + h;
    }
    l.conv = at;
    at += k > 1 ? (k - 1) * d : 0;
    if (l.attention.window) {
      l.ring_k = at;
      l.ring_v = l.ring_k + w * d;
      at = l.ring_v + w * d;
    }
    l.floats = at;
    out.floats += at;
    out.layers.push_back(l);
  }
  return out;
}

SessionState NewSessionState(const ModelConfig& config, const SamplingParams& sampling) {
  SessionState st;
  st.sampling = sampling;
  st.rng.Seed(sampling.seed);
  if (!config.has_state()) return st;
  const StateLayout layout = MakeStateLayout(config);
  st.linear.assign(layout.floats, 0.f);
  if (config.attention_kind == AttentionKind::kFavor) {
    const size_t h = config.num_attention_heads;
    for (const LayerStateLayout& l : layout.layers) {
      if (!l.attention.linear) continue;  // a softmax layer of layer_types
      float* m = st.linear.data() + l.begin + l.m;
      std::fill(m, m + h, -std::numeric_limits<float>::infinity());
    }
  }
  return st;
}

}  // namespace flatstate
