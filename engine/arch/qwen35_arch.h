// Qwen3.5's text model: Qwen3_5ForCausalLM ("qwen3_5_text") and the text part of
// Qwen3_5ForConditionalGeneration ("qwen3_5": config under "text_config", weights under
// model.language_model.*, the vision tower and MTP head skipped). A hybrid: per `layer_types`,
// Gated DeltaNet layers ("linear_attention": TokenMixer GatedDeltaNetMixer, kernels/
// gated_delta.h) and softmax layers with an output gate ("full_attention"), every layer then a
// SwiGLU MLP. Matched against transformers models/qwen3_5/modular_qwen3_5.py @009e78d6 and
// qwen3_next/modular_qwen3_next.py @043bb8dd (docs/kinds.md, "Qwen3.5").
//
//   x = RMSNorm_{1+w}(h); Gated DeltaNet layer:
//     qkv = conv_silu(x in_proj_qkv^T) (depthwise, K taps, no bias; the window is state)
//     z = x in_proj_z^T; beta = sigmoid(x in_proj_b^T); g = -exp(A_log) softplus(x in_proj_a^T
//     + dt_bias); o = GatedDeltaRule(q, k, v, g, beta) (q, k L2-normalised, q / sqrt(dk),
//     value head h on key head h / (Hv / Hk)); h += (RMSNorm_w(o) * silu(z)) out_proj^T
//   full-attention layer: q_proj holds per head [query hd | gate hd]; q, k RMSNorm_{1+w} per head,
//     RoPE on the first head_dim * partial_rotary_factor dims, GQA softmax attention,
//     h += (attn * sigmoid(gate)) o_proj^T
//   h += SwiGLU(RMSNorm_{1+w}(h)); logits = RMSNorm_{1+w}(h) lm_head^T (tied: the embedding)
// RMSNorm_{1+w} multiplies by (1 + w) (folded into w at load); the gated norm by w.
//
// config.json keys (inside text_config for the multimodal class): vocab_size, hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// rms_norm_eps, layer_types (else every full_attention_interval-th layer, default 4, is full
// attention), linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
// linear_value_head_dim, linear_conv_kernel_dim, rope_parameters {rope_theta,
// partial_rotary_factor, rope_type "default"; mrope_section / mrope_interleaved are plain RoPE
// for text} (or rope_theta / partial_rotary_factor at the top level), attn_output_gate (true),
// tie_word_embeddings, max_position_embeddings, hidden_act ("silu"), bos/eos_token_id.
// Tensors (P = "model." or "model.language_model.", i = layer):
//   P embed_tokens.weight [V, D]; P norm.weight [D]; lm_head.weight [V, D] (absent when tied);
//   P layers.i.input_layernorm.weight, .post_attention_layernorm.weight [D];
//   .mlp.gate_proj / up_proj.weight [I, D], .mlp.down_proj.weight [D, I];
//   linear_attention: .linear_attn.in_proj_qkv.weight [2 Hk dk + Hv dv, D], .in_proj_z.weight
//     [Hv dv, D], .in_proj_b.weight / .in_proj_a.weight [Hv, D], .conv1d.weight [2 Hk dk + Hv dv,
//     1, K], .A_log / .dt_bias [Hv], .norm.weight [dv], .out_proj.weight [D, Hv dv];
//   full_attention: .self_attn.q_proj.weight [2 H hd, D], .k_proj / .v_proj.weight [KV hd, D],
//     .o_proj.weight [D, H hd], .q_norm / .k_norm.weight [hd].
//
// Stateless; thread-safe. Errors: engine/model/model.h (config keys and tensors by name).
#ifndef FLATSTATE_ENGINE_ARCH_QWEN35_ARCH_H_
#define FLATSTATE_ENGINE_ARCH_QWEN35_ARCH_H_

#include <string>
#include <vector>

#include "engine/arch/architecture.h"

namespace flatstate {

class Qwen35Architecture final : public Architecture {
 public:
  absl::string_view name() const override { return "qwen3_5"; }
  std::vector<absl::string_view> class_names() const override {
    return {"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"};
  }
  absl::string_view model_type() const override { return "qwen3_5_text"; }
  absl::StatusOr<ModelConfig> ParseConfig(absl::string_view text, const nlohmann::json& j,
                                          absl::string_view path,
                                          std::vector<std::string>* ignored) const override;
  absl::Status BindWeights(ModelConfig* config, const WeightFiles& files, TensorStore* store,
                           ModelWeights* weights) const override;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_QWEN35_ARCH_H_
