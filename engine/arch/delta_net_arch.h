// fla's DeltaNet model: DeltaNetForCausalLM (model_type "delta_net"), as flash-linear-attention
// saves it (fla-hub/delta_net-1.3B-100B's layout; fla/models/delta_net/{configuration,modeling}_
// delta_net.py, fla/layers/delta_net.py, fla/ops/delta_rule/naive.py; read at
// fla-org/flash-linear-attention bc3b101d; docs/kinds.md, "DeltaNet, fla layout"). Every layer is
// h += DeltaNet(RMSNorm(h)); h += SwiGLU(RMSNorm(h)); logits = RMSNorm(h) lm_head^T. The layer is
// the gated delta rule with no decay (g = 0; kernels/gated_delta.h, engine/runtime/mixers/
// delta_net_mixer.h): with H = num_heads, dk = int(hidden_size * expand_k) / H,
// dv = int(hidden_size * expand_v) / H:
//   q, k, v = conv(x q_proj^T), conv(x k_proj^T), conv(x v_proj^T) (q_conv1d / k_conv1d /
//     v_conv1d, conv_size taps, no bias; fused into one conv over q|k|v; none without
//     use_short_conv); v = silu(v); q, k = silu(.) for qk_activation "silu", unchanged for
//     "identity"
//   beta = sigmoid(x b_proj^T) (use_beta; else 1), times 2 with allow_neg_eigval
//   o = GatedDeltaRule(q, k, v, g = 0, beta) (q, k L2-normalised: qk_norm "l2"; q * dk^-0.5)
//   use_gate: o = RMSNorm_head(o) o_norm.weight swish(x g_proj^T); else RMSNorm_head(o)
//   o_norm.weight h += o o_proj^T
//
// config.json keys: vocab_size, hidden_size, num_hidden_layers (required); num_heads (16),
// expand_k (1), expand_v (1), use_gate (false), use_short_conv (true), conv_size (4), use_beta
// (true), allow_neg_eigval (false), qk_activation ("silu"; "identity"; relu and elu are refused),
// qk_norm ("l2"; "sum" is refused), use_output_norm (true; fla's DeltaNet layer takes it in
// **kwargs and always norms, so either value runs the norm), attn (fla's hybrid softmax layers,
// engine/arch/fla_common.h ReadFlaAttn), and the keys every fla model reads (fla_common.h:
// hidden_ratio / intermediate_size, norm_eps, hidden_act "swish", attnres_block_size null, ...).
// Tensors (i = layer; Kw = H dk, Vw = H dv, K = conv_size):
//   model.embeddings.weight [V, D]; model.norm.weight [D]; lm_head.weight [V, D] (absent when
//   tied); model.layers.i.attn_norm.weight, .mlp_norm.weight [D]; .mlp.gate_proj / up_proj.weight
//   [I, D], .mlp.down_proj.weight [D, I]; model.layers.i.attn.q_proj.weight, .k_proj.weight
//   [Kw, D], .v_proj.weight [Vw, D], .q_conv1d.weight / .k_conv1d.weight [Kw, 1, K],
//   .v_conv1d.weight [Vw, 1, K] (use_short_conv), .g_proj.weight [Vw, D] (use_gate),
//   .b_proj.weight [H, D] (use_beta), .o_norm.weight [dv], .o_proj.weight [D, Vw]. A softmax
//   layer of attn holds .attn.q_proj / k_proj / v_proj / o_proj instead (fla_common.h).
//
// Stateless; thread-safe. Errors: engine/model/model.h (config keys and tensors by name).
#ifndef FLATSTATE_ENGINE_ARCH_DELTA_NET_ARCH_H_
#define FLATSTATE_ENGINE_ARCH_DELTA_NET_ARCH_H_

#include <string>
#include <vector>

#include "engine/arch/architecture.h"

namespace flatstate {

class DeltaNetArchitecture final : public Architecture {
 public:
  absl::string_view name() const override { return "delta_net"; }
  std::vector<absl::string_view> class_names() const override { return {"DeltaNetForCausalLM"}; }
  absl::string_view model_type() const override { return "delta_net"; }
  absl::StatusOr<ModelConfig> ParseConfig(absl::string_view text, const nlohmann::json& j,
                                          absl::string_view path,
                                          std::vector<std::string>* ignored) const override;
  absl::Status BindWeights(ModelConfig* config, const WeightFiles& files, TensorStore* store,
                           ModelWeights* weights) const override;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_DELTA_NET_ARCH_H_
