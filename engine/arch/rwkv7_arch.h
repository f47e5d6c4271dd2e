// RWKV-7 "Goose" in the fla-hub layout: RWKV7ForCausalLM ("rwkv7", fla-org/flash-linear-attention
// fla/models/rwkv7). Every layer is
//   h += TimeMix(LN(h; attn_norm)); h += ChannelMix(LN(h; ffn_norm))
// over h = LN(embeddings; layer 0's pre_norm) (folded into the embedding rows at load), then
// logits = LN(h; norm) lm_head^T. TimeMix is Rwkv7Mixer (engine/runtime/mixers/rwkv7_mixer.h),
// ChannelMix Mlp<D>'s squared-ReLU with token shift; LN is LayerNorm with bias, eps norm_eps.
// Matched against tools/flatstate_ref/rwkv7.py (fla, BlinkDL's rwkv_v7_numpy.py) and llama.cpp's
// rwkv7 graph (docs/kinds.md, "RWKV-7").
//
// config.json keys: vocab_size, hidden_size, num_hidden_layers (required); head_dim (64; divides
// hidden_size; num_heads, if set, is hidden_size / head_dim), decay_low_rank_dim,
// a_low_rank_dim, v_low_rank_dim, gate_low_rank_dim (null: fla's defaults from hidden_size and
// head_dim), intermediate_size (null: hidden_size * hidden_ratio (4) rounded up to 32),
// norm_eps (1e-5), fuse_norm (true: the key normalisation's fla form), hidden_act ("sqrelu"
// only), norm_first and norm_bias (true; false is refused), attn (null; hybrid softmax layers
// are refused), value_dim (hidden_size per layer, if set), tie_word_embeddings, bos/eos_token_id.
// Tensors (P = model.layers.i.; D = hidden, H x N = heads x head_dim, R* the ranks, I the FFN):
//   model.embeddings.weight [V, D]; model.layers.0.pre_norm.weight / .bias [D];
//   P attn_norm / ffn_norm .weight / .bias [D]; P attn.x_r/x_w/x_k/x_v/x_a/x_g [1, 1, D];
//   P attn.k_k, attn.k_a [D]; P attn.r_k [H, N]; P attn.r_proj/k_proj/v_proj/o_proj.weight [D, D];
//   P attn.w_lora / a_lora / v_lora (not on layer 0) .lora.0.weight [R, D], .lora.2.weight [D, R],
//   .lora.2.bias [D]; P attn.g_lora.lora.0.weight [Rg, D], .lora.2.weight [D, Rg];
//   P attn.g_norm.weight / .bias [D]; P ffn.x_k [D]; P ffn.key.weight [I, D];
//   P ffn.value.weight [D, I]; model.norm.weight / .bias [D]; lm_head.weight [V, D] (absent when
//   tied).
//
// The World vocabulary has no chat template: default_chat_format gives RWKV's.
//
// Stateless; thread-safe. Errors: engine/model/model.h (config keys and tensors by name).
#ifndef FLATSTATE_ENGINE_ARCH_RWKV7_ARCH_H_
#define FLATSTATE_ENGINE_ARCH_RWKV7_ARCH_H_

#include <string>
#include <vector>

#include "engine/arch/architecture.h"

namespace flatstate {

class Rwkv7Architecture final : public Architecture {
 public:
  absl::string_view name() const override { return "rwkv7"; }
  std::vector<absl::string_view> class_names() const override { return {"RWKV7ForCausalLM"}; }
  absl::string_view model_type() const override { return "rwkv7"; }
  absl::StatusOr<ModelConfig> ParseConfig(absl::string_view text, const nlohmann::json& j,
                                          absl::string_view path,
                                          std::vector<std::string>* ignored) const override;
  absl::Status BindWeights(ModelConfig* config, const WeightFiles& files, TensorStore* store,
                           ModelWeights* weights) const override;
  // RWKV's chat format (BlinkDL's chat demos, RWKV-Runner): "System: ...\n\nUser: ...\n\n
  // Assistant: ...\n\n", a blank line inside a message folded to one newline (it ends a turn),
  // the reply prompted by "Assistant:" and ended by "\n\n".
  ChatFormat default_chat_format() const override;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_RWKV7_ARCH_H_
