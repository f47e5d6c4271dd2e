#include "engine/arch/gla_arch.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/arch/fla_common.h"
#include "engine/arch/hf_config.h"
#include "engine/arch/hf_tensors.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

// fla's GatedLinearAttention constants that its GLABlock never overrides.
constexpr int kGateLowRankDim = 16;
constexpr float kGateLogitNormalizer = 16.f;

// (first row, count) per head j of H: the rows of kv head j / G, each `dim` rows long; empty
// when G == 1 (every row, in order).
std::vector<std::pair<int64_t, int64_t>> ExpandedRows(int heads, int groups, int64_t dim) {
  std::vector<std::pair<int64_t, int64_t>> rows;
  if (groups == 1) return rows;
  for (int j = 0; j < heads; ++j) rows.emplace_back(int64_t{j / groups} * dim, dim);
  return rows;
}

}  // namespace

absl::StatusOr<ModelConfig> GlaArchitecture::ParseConfig(absl::string_view /*text*/,
                                                         const nlohmann::json& j,
                                                         absl::string_view path,
                                                         std::vector<std::string>* ignored) const {
  HfConfigReader r(j, path);
  ModelConfig c;
  c.architecture = std::string(name());
  RETURN_IF_ERROR(ReadFlaCommon(r, &c));
  GlaShape& g = c.gla;
  int heads = 4;
  RETURN_IF_ERROR(r.Int("num_heads", false, 1, 4096, &heads));
  int kv_heads = heads;
  RETURN_IF_ERROR(r.Int("num_kv_heads", false, 1, 4096, &kv_heads));
  if (heads % kv_heads != 0) {
    return r.Bad("num_kv_heads",
                 absl::StrCat("= ", kv_heads, " does not divide num_heads = ", heads));
  }
  double expand_k = 0.5, expand_v = 1.0;
  RETURN_IF_ERROR(r.Positive("expand_k", &expand_k));
  RETURN_IF_ERROR(r.Positive("expand_v", &expand_v));
  const int64_t key_dim = static_cast<int64_t>(c.hidden_size * expand_k);
  const int64_t value_dim = static_cast<int64_t>(c.hidden_size * expand_v);
  if (key_dim < heads || key_dim % heads != 0 || key_dim / heads > 4096) {
    return r.Bad("expand_k", absl::StrCat("= ", expand_k, " gives a key dim of ", key_dim,
                                          ", not a multiple of num_heads = ", heads));
  }
  if (value_dim < heads || value_dim % heads != 0 || value_dim / heads > 4096) {
    return r.Bad("expand_v", absl::StrCat("= ", expand_v, " gives a value dim of ", value_dim,
                                          ", not a multiple of num_heads = ", heads));
  }
  g.heads = heads;
  g.key_dim = static_cast<int>(key_dim / heads);
  g.value_dim = static_cast<int>(value_dim / heads);
  g.gate_rank = kGateLowRankDim;
  g.gate_normalizer = kGateLogitNormalizer;
  bool short_conv = false;
  RETURN_IF_ERROR(r.Bool("use_short_conv", &short_conv));
  int conv_size = 4;
  RETURN_IF_ERROR(r.Int("conv_size", false, 1, 64, &conv_size));
  g.conv_kernel = short_conv ? conv_size : 0;
  RETURN_IF_ERROR(r.Bool("use_output_gate", &g.output_gate));
  double clamp = -1e30;
  RETURN_IF_ERROR(ReadFlaNumber(r, "clamp_min", &clamp));
  if (clamp > 0) return r.Bad("clamp_min", absl::StrCat("= ", clamp, " is > 0 (a log decay)"));
  g.clamp_min = static_cast<float>(clamp);
  RETURN_IF_ERROR(RequireFlaNull(r, "feature_map", "feature maps on q and k are not supported"));
  RETURN_IF_ERROR(r.RequireBool("elementwise_affine", true));
  bool fuse_norm = true;
  RETURN_IF_ERROR(r.Bool("fuse_norm", &fuse_norm));
  // fla names the per-head norm by whether it is fused with the gate (same math either way).
  g.fused_gate_norm = fuse_norm && g.output_gate;
  // What the rest of the engine reads of any model (attn replaces it with the softmax layers');
  // BindWeights expands fla's kv groups by kv_groups.
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = g.key_dim;
  g.kv_groups = heads / kv_heads;
  // use_gk / use_gv are GLAConfig keys that fla's GatedLinearAttention never reads.
  r.Known({"use_gk", "use_gv"});
  RETURN_IF_ERROR(FinishFlaConfig(r, &c, ignored));
  return c;
}

absl::Status GlaArchitecture::BindWeights(ModelConfig* config, const WeightFiles& files,
                                          TensorStore* store, ModelWeights* w) const {
  const ModelConfig& c = *config;
  const GlaShape& g = c.gla;
  const int64_t D = c.hidden_size, Kw = g.key_width(), Vw = g.value_width(), R = g.gate_rank;
  const int G = g.kv_groups;
  const int64_t Kg = Kw / G, Vg = Vw / G;  // k / v rows in the file
  const auto k_rows = ExpandedRows(g.heads, G, g.key_dim);
  const auto v_rows = ExpandedRows(g.heads, G, g.value_dim);
  using K = HfTensor::Kind;
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
    t.push_back({K::kGemm,
                 {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                 {{Kw, D}, {Kg, D}, {Vg, D}},
                 nullptr,
                 &l.wqkv,
                 {{}, k_rows, v_rows}});
    if (g.conv_kernel > 0) {
      const int64_t k = g.conv_kernel;
      t.push_back({K::kVector,
                   {a + "q_conv1d.weight", a + "k_conv1d.weight", a + "v_conv1d.weight"},
                   {{Kw, 1, k}, {Kg, 1, k}, {Vg, 1, k}},
                   &l.conv,
                   nullptr,
                   {{}, k_rows, v_rows}});
    }
    if (g.output_gate) {
      t.push_back({K::kGemm, {a + "g_proj.weight"}, {{Vw, D}}, nullptr, &l.wzba});
    }
    t.push_back({K::kGemm, {a + "gk_proj.0.weight"}, {{R, D}}, nullptr, &l.gla.gk1});
    t.push_back({K::kGemm, {a + "gk_proj.1.weight"}, {{Kg, R}}, nullptr, &l.gla.gk2, {k_rows}});
    t.push_back({K::kVector, {a + "gk_proj.1.bias"}, {{Kg}}, &l.gla.gk_bias, nullptr, {k_rows}});
    t.push_back({K::kNorm,
                 {a + (g.fused_gate_norm ? "g_norm_swish_gate.weight" : "g_norm.weight")},
                 {{g.value_dim}},
                 &l.delta_norm});
    t.push_back({K::kGemm, {a + "o_proj.weight"}, {{D, Vw}}, nullptr, &l.wo});
  }
  return BindFlaModel(t, class_names().front(), files, config, store, w);
}

}  // namespace flatstate
