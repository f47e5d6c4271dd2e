// fla's Gated Linear Attention model: GLAForCausalLM (model_type "gla"), as flash-linear-attention
// saves it (fla/models/gla/{configuration_gla.py, modeling_gla.py}, fla/layers/gla.py; read at
// fla-org/flash-linear-attention bc3b101d; docs/kinds.md, "GLA"). Every layer is
//   h += GLA(RMSNorm(h));  h += SwiGLU(RMSNorm(h))   (engine/runtime/mixers/gla_mixer.h)
// then logits = RMSNorm(h) lm_head^T (tied: the embedding). The GLA layer, with H = num_heads,
// dk = int(hidden_size * expand_k) / H, dv = int(hidden_size * expand_v) / H, G = H / num_kv_heads:
//   q = x q_proj^T, k = x k_proj^T, v = x v_proj^T (k and v: H / G heads, head j of q reads
//   k/v head j / G); use_short_conv: each silu(depthwise causal conv) (q_conv1d, k_conv1d,
//   v_conv1d; no bias); gk = logsigmoid(gk_proj.1(gk_proj.0(x))) / 16, clamped below at
//   clamp_min; o = GLA recurrence (q scaled by dk^-0.5); use_output_gate:
//   o = RMSNorm_head(o) * w * swish(x g_proj^T), else RMSNorm_head(o) * w; h += o o_proj^T.
// fla's gate_logit_normalizer (16) and gate_low_rank_dim (16) are not config keys: the model
// always builds its layers with them, and so does this entry.
//
// config.json keys: vocab_size, hidden_size, num_hidden_layers (required); num_heads (4),
// num_kv_heads (null: num_heads), expand_k (0.5), expand_v (1), hidden_ratio (4) /
// intermediate_size (null: int(hidden_size * hidden_ratio * 2 / 3) rounded up to a multiple of
// 256), use_short_conv (false), conv_size (4), use_output_gate (true), clamp_min (null),
// hidden_act ("swish" only: the MLP's and the output gate's), norm_eps (1e-6), elementwise_affine
// (true; false is refused), fuse_norm (true: the g_norm_swish_gate name, else g_norm; same math),
// tie_word_embeddings (false), bos/eos_token_id, attn (fla's hybrid softmax layers,
// engine/arch/fla_common.h ReadFlaAttn: their layers hold the attn.q/k/v/o_proj tensors there
// instead). Refused when set: feature_map, attnres_block_size. Known without effect on the math: attn_mode, use_gk,
// use_gv (not read by fla's layer), fuse_swiglu, fuse_cross_entropy, fuse_linear_cross_entropy,
// use_l2warp, max_position_embeddings (no positions), initializer_range, use_cache.
// Tensors (i = layer; Kw = H dk, Vw = H dv, r = 16):
//   model.embeddings.weight [V, D]; model.norm.weight [D]; lm_head.weight [V, D] (absent when
//   tied); model.layers.i.attn_norm.weight, .mlp_norm.weight [D];
//   model.layers.i.attn.q_proj.weight [Kw, D], .k_proj.weight [Kw / G, D], .v_proj.weight
//   [Vw / G, D], .g_proj.weight [Vw, D] (use_output_gate), .gk_proj.0.weight [r, D],
//   .gk_proj.1.weight [Kw / G, r], .gk_proj.1.bias [Kw / G], .o_proj.weight [D, Vw],
//   .g_norm_swish_gate.weight [dv] (fuse_norm and use_output_gate; else .g_norm.weight),
//   .q_conv1d.weight [Kw, 1, K], .k_conv1d.weight [Kw / G, 1, K], .v_conv1d.weight
//   [Vw / G, 1, K] (use_short_conv); model.layers.i.mlp.gate_proj / up_proj.weight [I, D],
//   .mlp.down_proj.weight [D, I].
// The kv groups are expanded at load (each head gets its k, v, gk rows and conv taps).
//
// Stateless; thread-safe. Errors: engine/model/model.h (config keys and tensors by name).
#ifndef FLATSTATE_ENGINE_ARCH_GLA_ARCH_H_
#define FLATSTATE_ENGINE_ARCH_GLA_ARCH_H_

#include <string>
#include <vector>

#include "engine/arch/architecture.h"

namespace flatstate {

class GlaArchitecture final : public Architecture {
 public:
  absl::string_view name() const override { return "gla"; }
  std::vector<absl::string_view> class_names() const override { return {"GLAForCausalLM"}; }
  absl::string_view model_type() const override { return "gla"; }
  absl::StatusOr<ModelConfig> ParseConfig(absl::string_view text, const nlohmann::json& j,
                                          absl::string_view path,
                                          std::vector<std::string>* ignored) const override;
  absl::Status BindWeights(ModelConfig* config, const WeightFiles& files, TensorStore* store,
                           ModelWeights* weights) const override;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_GLA_ARCH_H_
