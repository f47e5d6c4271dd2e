#include "engine/arch/gated_deltanet_arch.h"

#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "engine/arch/fla_common.h"
#include "engine/arch/hf_config.h"
#include "engine/arch/hf_tensors.h"
#include "engine/util/status_macros.h"

namespace flatstate {

absl::StatusOr<ModelConfig> GatedDeltaNetArchitecture::ParseConfig(
    absl::string_view /*text*/, const nlohmann::json& j, absl::string_view path,
    std::vector<std::string>* ignored) const {
  HfConfigReader r(j, path);
  ModelConfig c;
  c.architecture = std::string(name());
  RETURN_IF_ERROR(ReadFlaCommon(r, &c));
  DeltaNetShape& dn = c.delta;
  int heads = 6, head_dim = 256;
  RETURN_IF_ERROR(r.Int("num_heads", false, 1, 4096, &heads));
  RETURN_IF_ERROR(r.Int("head_dim", false, 1, 4096, &head_dim));
  int v_heads = heads;
  RETURN_IF_ERROR(r.Int("num_v_heads", false, 1, 4096, &v_heads));
  if (v_heads % heads != 0) {
    return r.Bad("num_v_heads",
                 absl::StrCat("= ", v_heads, " is not a multiple of num_heads = ", heads));
  }
  double expand_v = 2.0;
  RETURN_IF_ERROR(r.Positive("expand_v", &expand_v));
  const double dv = head_dim * expand_v;
  const int value_dim = static_cast<int>(dv);
  if (value_dim < 1 || value_dim > 4096 || std::abs(dv - value_dim) > 1e-5 * dv) {
    return r.Bad("expand_v", absl::StrCat("= ", expand_v, " times head_dim = ", head_dim,
                                          " is not a whole value head dim"));
  }
  dn.key_heads = heads;
  dn.value_heads = v_heads;
  dn.key_dim = head_dim;
  dn.value_dim = value_dim;
  dn.conv_kernel = 4;
  RETURN_IF_ERROR(r.Int("conv_size", false, 1, 64, &dn.conv_kernel));
  RETURN_IF_ERROR(r.RequireBool("use_short_conv", true));
  RETURN_IF_ERROR(r.RequireBool("use_gate", true));
  RETURN_IF_ERROR(r.RequireBool("allow_neg_eigval", false));
  // What the rest of the engine reads of any model.
  c.num_attention_heads = v_heads;
  c.num_key_value_heads = v_heads;
  c.head_dim = value_dim;
  RETURN_IF_ERROR(FinishFlaConfig(r, &c, ignored));
  return c;
}

absl::Status GatedDeltaNetArchitecture::BindWeights(ModelConfig* config, const WeightFiles& files,
                                                    TensorStore* store, ModelWeights* w) const {
  const ModelConfig& c = *config;
  const DeltaNetShape& dn = c.delta;
  const int64_t D = c.hidden_size, Vw = dn.value_width();
  const int64_t Hv = dn.value_heads;
  using Kind = HfTensor::Kind;
  std::vector<HfTensor> t;
  AddFlaModelTensors(c, w, &t);
  w->layers.assign(c.num_hidden_layers, LayerWeights{});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w->layers[i];
    const std::string a = absl::StrCat("model.layers.", i, ".attn.");
    AddFlaBlockTensors(c, i, &l, &t);
    if (c.layer_attention(i).softmax) {
      AddFlaAttnTensors(c, i, &l, &t);
      continue;
    }
    AddFlaDeltaQkvTensors(a, dn, D, &l, &t);  // use_short_conv is required: conv_kernel > 0
    // The mixer's z | b | a GEMM: the output gate, then beta's and the decay's logits.
    t.push_back({Kind::kGemm,
                 {a + "g_proj.weight", a + "b_proj.weight", a + "a_proj.weight"},
                 {{Vw, D}, {Hv, D}, {Hv, D}},
                 nullptr,
                 &l.wzba});
    t.push_back({Kind::kVector, {a + "A_log"}, {{Hv}}, &l.A_log});
    t.push_back({Kind::kVector, {a + "dt_bias"}, {{Hv}}, &l.dt_bias});
    t.push_back({Kind::kVector, {a + "o_norm.weight"}, {{dn.value_dim}}, &l.delta_norm});
    t.push_back({Kind::kGemm, {a + "o_proj.weight"}, {{D, Vw}}, nullptr, &l.wo});
  }
  return BindFlaModel(t, class_names().front(), files, config, store, w);
}

}  // namespace flatstate
