// flatstate's own model format (config "architectures": ["FlatstateForCausalLM"], or a config
// with "attention_kind" and neither key): the eight shipped kinds (docs/model-format.md).
//
// Tensor names (and shapes) in model.safetensors, in order: the table is data,
// engine/arch/flatstate_tensors.json, compiled in and interpreted by FlatstateTensorTable
// (flatstate_tensors.h; tools/export.py reads the same file). D = hidden, H = heads, hd = head_dim,
// F = intermediate, K = conv_kernel_size, NF = favor_num_features, R = rfa_num_features
// (docs/kinds.md for gated, window and hybrid; a softmax layer of layer_types has no conv and no
// kind-specific tensor):
//   embed.weight                      [256, D]
//   layers.{i}.attn_norm.weight       [D]
//   layers.{i}.attn.conv              [D, K]        (ModelConfig::layer_has_conv)
//   layers.{i}.attn.wqkv.weight       [3D, D]       rows: q (D), k (D), v (D); head h = rows h*hd..
//   layers.{i}.attn.wo.weight         [D, D]
//   layers.{i}.attn.decay_logit       [H]           (cosine)
//   layers.{i}.attn.feature_proj      [NF, hd]      (favor; gated: [R, hd])
//   layers.{i}.attn.feature_log_scale [H]           (gated)
//   layers.{i}.attn.gate.weight       [H, D]        (gated)
//   layers.{i}.attn.gate.bias         [H]           (gated)
//   layers.{i}.mlp_norm.weight        [D]
//   layers.{i}.mlp.w1.weight          [F, D]
//   layers.{i}.mlp.w2.weight          [D, F]
//   norm.weight                       [D]
//   lm_head.weight                    [256, D]
// wqkv, wo, w1 and w2 are F32, or BF16 when ModelConfig::torch_dtype is kBfloat16, or for kInt8
// I8 [n, k] quants (kInt4: U8 [n, ceil(k / 2)], two per byte) each with an F32 scale tensor
// "<name>_scale" [n, ceil(k / 32)]; every other tensor is F32.
//
// Stateless; thread-safe. BindWeights' errors: engine/model/model.h.
#ifndef FLATSTATE_ENGINE_ARCH_FLATSTATE_ARCH_H_
#define FLATSTATE_ENGINE_ARCH_FLATSTATE_ARCH_H_

#include "engine/arch/architecture.h"
#include "engine/arch/flatstate_tensors.h"

namespace flatstate {

class FlatstateArchitecture final : public Architecture {
 public:
  absl::string_view name() const override { return "flatstate"; }
  std::vector<absl::string_view> class_names() const override { return {"FlatstateForCausalLM"}; }
  absl::string_view model_type() const override { return "flatstate"; }
  absl::StatusOr<ModelConfig> ParseConfig(absl::string_view text, const nlohmann::json& j,
                                          absl::string_view path,
                                          std::vector<std::string>* ignored) const override;
  absl::Status BindWeights(ModelConfig* config, const WeightFiles& files, TensorStore* store,
                           ModelWeights* weights) const override;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_FLATSTATE_ARCH_H_
