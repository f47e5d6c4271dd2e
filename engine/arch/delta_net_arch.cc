#include "engine/arch/delta_net_arch.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "engine/arch/fla_common.h"
#include "engine/arch/hf_config.h"
#include "engine/arch/hf_tensors.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

// int(hidden_size * expand) split over `heads` (fla's key_dim // num_heads, which it asserts
// divides).
absl::Status HeadDim(HfConfigReader& r, const std::string& key, double expand, int hidden,
                     int heads, int* out) {
  const int64_t width = static_cast<int64_t>(hidden * expand);
  if (width < heads || width % heads != 0 || width / heads > 4096) {
    return r.Bad(key, absl::StrCat("= ", expand, " gives a width of ", width,
                                   ", not a multiple of num_heads = ", heads));
  }
  *out = static_cast<int>(width / heads);
  return absl::OkStatus();
}

// A string key that may be absent (then *out is left) and must be one of `allowed`.
absl::Status ReadChoice(HfConfigReader& r, const std::string& key,
                        std::initializer_list<const char*> allowed, absl::string_view why,
                        std::string* out) {
  const nlohmann::json* v = r.Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (v->is_string()) {
    const std::string text = v->get<std::string>();
    for (const char* a : allowed) {
      if (text == a) {
        *out = a;
        return absl::OkStatus();
      }
    }
  }
  return r.Bad(key, absl::StrCat("= ", v->dump(), " is not supported (", why, ")"));
}

}  // namespace

absl::StatusOr<ModelConfig> DeltaNetArchitecture::ParseConfig(
    absl::string_view /*text*/, const nlohmann::json& j, absl::string_view path,
    std::vector<std::string>* ignored) const {
  HfConfigReader r(j, path);
  ModelConfig c;
  c.architecture = std::string(name());
  RETURN_IF_ERROR(ReadFlaCommon(r, &c));
  DeltaNetShape& dn = c.delta;
  int heads = 16;
  RETURN_IF_ERROR(r.Int("num_heads", false, 1, 4096, &heads));
  double expand_k = 1.0, expand_v = 1.0;
  RETURN_IF_ERROR(r.Positive("expand_k", &expand_k));
  RETURN_IF_ERROR(r.Positive("expand_v", &expand_v));
  dn.key_heads = dn.value_heads = heads;
  RETURN_IF_ERROR(HeadDim(r, "expand_k", expand_k, c.hidden_size, heads, &dn.key_dim));
  RETURN_IF_ERROR(HeadDim(r, "expand_v", expand_v, c.hidden_size, heads, &dn.value_dim));
  dn.decay = false;
  bool short_conv = true;
  RETURN_IF_ERROR(r.Bool("use_short_conv", &short_conv));
  int conv_size = 4;
  RETURN_IF_ERROR(r.Int("conv_size", false, 1, 64, &conv_size));
  dn.conv_kernel = short_conv ? conv_size : 0;
  dn.output_gate = false;
  RETURN_IF_ERROR(r.Bool("use_gate", &dn.output_gate));
  RETURN_IF_ERROR(r.Bool("use_beta", &dn.use_beta));
  bool neg_eigval = false;
  RETURN_IF_ERROR(r.Bool("allow_neg_eigval", &neg_eigval));
  dn.beta_scale = neg_eigval ? 2.f : 1.f;
  std::string act = "silu", norm = "l2";
  RETURN_IF_ERROR(ReadChoice(r, "qk_activation", {"silu", "identity"}, "silu or identity", &act));
  dn.qk_silu = act == "silu";
  RETURN_IF_ERROR(ReadChoice(r, "qk_norm", {"l2"}, "l2 only", &norm));
  // DeltaNetBlock passes use_output_norm to the layer, which takes it in **kwargs: o_norm always.
  bool output_norm = true;
  RETURN_IF_ERROR(r.Bool("use_output_norm", &output_norm));
  // What the rest of the engine reads of any model (attn replaces it with the softmax layers').
  c.num_attention_heads = heads;
  c.num_key_value_heads = heads;
  c.head_dim = dn.value_dim;
  RETURN_IF_ERROR(FinishFlaConfig(r, &c, ignored));
  return c;
}

absl::Status DeltaNetArchitecture::BindWeights(ModelConfig* config, const WeightFiles& files,
                                               TensorStore* store, ModelWeights* w) const {
  const ModelConfig& c = *config;
  const DeltaNetShape& dn = c.delta;
  const int64_t D = c.hidden_size, Vw = dn.value_width();
  const int64_t H = dn.value_heads;
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
    AddFlaDeltaQkvTensors(a, dn, D, &l, &t);
    // The mixer's z | b GEMM: the output gate, then beta's logits (either may be absent).
    HfTensor zb{Kind::kGemm, {}, {}, nullptr, &l.wzba};
    if (dn.output_gate) {
      zb.names.push_back(a + "g_proj.weight");
      zb.shapes.push_back({Vw, D});
    }
    if (dn.use_beta) {
      zb.names.push_back(a + "b_proj.weight");
      zb.shapes.push_back({H, D});
    }
    if (!zb.names.empty()) t.push_back(zb);
    t.push_back({Kind::kNorm, {a + "o_norm.weight"}, {{dn.value_dim}}, &l.delta_norm});
    t.push_back({Kind::kGemm, {a + "o_proj.weight"}, {{D, Vw}}, nullptr, &l.wo});
  }
  return BindFlaModel(t, class_names().front(), files, config, store, w);
}

}  // namespace flatstate
