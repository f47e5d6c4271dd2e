// Mamba-2 in the transformers layout: Mamba2ForCausalLM ("mamba2"). Every layer is
//   h += Mamba2Mixer(RMSNorm(h))   (no MLP; engine/runtime/mixers/mamba2_mixer.h for the math)
// then logits = RMSNorm(h) lm_head^T (tied: the embedding). Matched against transformers
// models/mamba2/modeling_mamba2.py (torch_forward) and llama.cpp's mamba2 graph (docs/kinds.md,
// "Mamba-2").
//
// config.json keys: vocab_size, hidden_size, num_hidden_layers (required); state_size (128),
// expand (2), num_heads (128), head_dim (64) with num_heads * head_dim = expand * hidden_size,
// n_groups (8, dividing num_heads), conv_kernel (4), use_conv_bias (true), use_bias (false; true
// is refused), layer_norm_epsilon (1e-5), rms_norm (true; false is refused), hidden_act ("silu"
// only), time_step_limit ([0, Infinity]: dt's clamp; Python's Infinity literal is accepted),
// tie_word_embeddings (false), bos/eos_token_id. Keys that do not change the math
// (residual_in_fp32, chunk_size, time_step_min/max/floor/rank, initializer_range, ...) are known.
// Tensors (i = layer; inner = num_heads * head_dim, conv_dim = inner + 2 n_groups state_size):
//   backbone.embeddings.weight [V, D]; backbone.norm_f.weight [D]; lm_head.weight [V, D]
//   (absent when tied); backbone.layers.i.norm.weight [D]; backbone.layers.i.mixer.
//   in_proj.weight [inner + conv_dim + num_heads, D] (rows z | xBC | dt), conv1d.weight
//   [conv_dim, 1, K], conv1d.bias [conv_dim] (use_conv_bias), dt_bias / A_log / D [num_heads],
//   norm.weight [inner], out_proj.weight [D, inner].
//
// Stateless; thread-safe. Errors: engine/model/model.h (config keys and tensors by name).
#ifndef FLATSTATE_ENGINE_ARCH_MAMBA2_ARCH_H_
#define FLATSTATE_ENGINE_ARCH_MAMBA2_ARCH_H_

#include <string>
#include <vector>

#include "engine/arch/architecture.h"

namespace flatstate {

class Mamba2Architecture final : public Architecture {
 public:
  absl::string_view name() const override { return "mamba2"; }
  std::vector<absl::string_view> class_names() const override { return {"Mamba2ForCausalLM"}; }
  absl::string_view model_type() const override { return "mamba2"; }
  absl::StatusOr<ModelConfig> ParseConfig(absl::string_view text, const nlohmann::json& j,
                                          absl::string_view path,
                                          std::vector<std::string>* ignored) const override;
  absl::Status BindWeights(ModelConfig* config, const WeightFiles& files, TensorStore* store,
                           ModelWeights* weights) const override;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_MAMBA2_ARCH_H_
