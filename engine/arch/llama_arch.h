// Hugging Face Llama-style decoders on the paged softmax path: LlamaForCausalLM ("llama", also
// MistralForCausalLM without a sliding window), Qwen2ForCausalLM ("qwen2": q, k, v biases) and
// Qwen3ForCausalLM ("qwen3": per-head RMSNorm of q and k before RoPE, q_norm / k_norm [head_dim],
// head_dim 128 unless given). Every layer is RMSNorm -> softmax attention with
// RoPE (grouped-query when num_key_value_heads < num_attention_heads) -> o_proj (+= residual) ->
// RMSNorm -> SwiGLU MLP (+= residual); final RMSNorm and lm_head (or the tied embedding).
//
// config.json keys read (transformers' LlamaConfig / Qwen2Config and their defaults):
//   vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads (required);
//   num_key_value_heads (= heads), head_dim (= hidden / heads), rms_norm_eps (1e-6), rope_theta
//   (10000), rope_scaling (null, {"rope_type": "linear", "factor"}, {"rope_type": "llama3",
//   "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}),
//   partial_rotary_factor (1), attention_bias (false; Qwen2: q/k/v biases always), mlp_bias
//   (false), tie_word_embeddings (false), max_position_embeddings (2048), hidden_act ("silu"
//   only), bos_token_id, eos_token_id. Keys whose value would change the math and are not
//   supported are errors naming the key (another hidden_act or rope_type, Qwen2's
//   use_sliding_window: true, layer_types other than full_attention).
// Tensors (safetensors, F32 / BF16 / F16; i = layer):
//   model.embed_tokens.weight [V, D]; model.norm.weight [D]; lm_head.weight [V, D] (absent when
//   tied); model.layers.{i}.input_layernorm.weight [D], .post_attention_layernorm.weight [D],
//   .self_attn.q_proj.weight [H hd, D], .k_proj / .v_proj.weight [KVH hd, D] (fused to wqkv),
//   .o_proj.weight [D, H hd], .mlp.gate_proj / .up_proj.weight [F, D] (fused to w1),
//   .mlp.down_proj.weight [D, F]; with biases the same names ending in .bias; Qwen3:
//   .self_attn.q_norm.weight, .self_attn.k_norm.weight [head_dim].
//
// Stateless; thread-safe. Errors: engine/model/model.h.
#ifndef FLATSTATE_ENGINE_ARCH_LLAMA_ARCH_H_
#define FLATSTATE_ENGINE_ARCH_LLAMA_ARCH_H_

#include <string>
#include <vector>

#include "engine/arch/architecture.h"

namespace flatstate {

class LlamaArchitecture final : public Architecture {
 public:
  enum class Family { kLlama, kQwen2, kQwen3 };
  explicit LlamaArchitecture(Family family) : family_(family) {}
  absl::string_view name() const override { return model_type(); }
  std::vector<absl::string_view> class_names() const override {
    switch (family_) {
      case Family::kQwen2:
        return {"Qwen2ForCausalLM"};
      case Family::kQwen3:
        return {"Qwen3ForCausalLM"};
      case Family::kLlama:
        break;
    }
    return {"LlamaForCausalLM", "MistralForCausalLM"};
  }
  absl::string_view model_type() const override {
    return family_ == Family::kQwen2 ? "qwen2" : family_ == Family::kQwen3 ? "qwen3" : "llama";
  }
  absl::StatusOr<ModelConfig> ParseConfig(absl::string_view text, const nlohmann::json& j,
                                          absl::string_view path,
                                          std::vector<std::string>* ignored) const override;
  absl::Status BindWeights(ModelConfig* config, const WeightFiles& files, TensorStore* store,
                           ModelWeights* weights) const override;

 private:
  Family family_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_LLAMA_ARCH_H_
