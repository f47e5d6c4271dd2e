// fla's Gated DeltaNet model: GatedDeltaNetForCausalLM (model_type "gated_deltanet"), as
// flash-linear-attention saves it (fla/models/gated_deltanet/{configuration,modeling}_
// gated_deltanet.py, fla/layers/gated_deltanet.py, fla/ops/gated_delta_rule; read at
// fla-org/flash-linear-attention bc3b101d; docs/kinds.md, "Gated DeltaNet, fla layout"). Every
// layer is h += GatedDeltaNet(RMSNorm(h)); h += SwiGLU(RMSNorm(h)); logits = RMSNorm(h) lm_head^T.
// The layer is Qwen3.5's (engine/runtime/mixers/gated_deltanet_mixer.h) with fla's names and
// separate projections: with Hk = num_heads, Hv = num_v_heads (null: Hk), dk = head_dim,
// dv = int(head_dim * expand_v):
//   q, k, v = silu(conv(x q_proj^T)), silu(conv(x k_proj^T)), silu(conv(x v_proj^T))
//     (q_conv1d / k_conv1d / v_conv1d, conv_size taps, no bias; fused into one conv over q|k|v)
//   beta = sigmoid(x b_proj^T); g = -exp(A_log) softplus(x a_proj^T + dt_bias)
//   o = GatedDeltaRule(q, k, v, g, beta) (q, k L2-normalised, q * dk^-0.5, value head h on key
//     head h / (Hv / Hk)); h += (RMSNorm_head(o) * o_norm.weight * swish(x g_proj^T)) o_proj^T
//
// config.json keys: vocab_size, hidden_size, num_hidden_layers (required); head_dim (256),
// num_heads (6), num_v_heads (null), expand_v (2), conv_size (4), use_short_conv (true; false is
// refused), use_gate (true; false is refused), allow_neg_eigval (false; true is refused),
// and the keys every fla model reads (engine/arch/fla_common.h: hidden_ratio /
// intermediate_size, norm_eps, hidden_act "swish", attnres_block_size null, ...); attn (fla's
// hybrid softmax layers, fla_common.h ReadFlaAttn: those layers hold attn.q/k/v/o_proj only).
// Tensors (i = layer; Kw = Hk dk, Vw = Hv dv):
//   model.embeddings.weight [V, D]; model.norm.weight [D]; lm_head.weight [V, D] (absent when
//   tied); model.layers.i.attn_norm.weight, .mlp_norm.weight [D]; .mlp.gate_proj / up_proj.weight
//   [I, D], .mlp.down_proj.weight [D, I]; model.layers.i.attn.q_proj.weight, .k_proj.weight
//   [Kw, D], .v_proj.weight [Vw, D], .a_proj.weight / .b_proj.weight [Hv, D], .A_log / .dt_bias
//   [Hv], .q_conv1d.weight / .k_conv1d.weight [Kw, 1, K], .v_conv1d.weight [Vw, 1, K],
//   .g_proj.weight [Vw, D], .o_norm.weight [dv], .o_proj.weight [D, Vw].
//
// Stateless; thread-safe. Errors: engine/model/model.h (config keys and tensors by name).
#ifndef FLATSTATE_ENGINE_ARCH_GATED_DELTANET_ARCH_H_
#define FLATSTATE_ENGINE_ARCH_GATED_DELTANET_ARCH_H_

#include <string>
#include <vector>

#include "engine/arch/architecture.h"

namespace flatstate {

class GatedDeltaNetArchitecture final : public Architecture {
 public:
  absl::string_view name() const override { return "gated_deltanet"; }
  std::vector<absl::string_view> class_names() const override {
    return {"GatedDeltaNetForCausalLM"};
  }
  absl::string_view model_type() const override { return "gated_deltanet"; }
  absl::StatusOr<ModelConfig> ParseConfig(absl::string_view text, const nlohmann::json& j,
                                          absl::string_view path,
                                          std::vector<std::string>* ignored) const override;
  absl::Status BindWeights(ModelConfig* config, const WeightFiles& files, TensorStore* store,
                           ModelWeights* weights) const override;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_GATED_DELTANET_ARCH_H_
