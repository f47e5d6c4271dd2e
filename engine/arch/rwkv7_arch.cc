#include "engine/arch/rwkv7_arch.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/arch/hf_config.h"
#include "engine/arch/hf_tensors.h"
#include "engine/util/status_macros.h"
#include "kernels/elementwise.h"

namespace flatstate {
namespace {

// fla's default low rank (fla/layers/rwkv7.py): max(32, round(c sqrt(D) f / 32) * 32), Python's
// round (half to even, as nearbyint).
int DefaultRank(double c, int hidden, double factor) {
  const double x = std::nearbyint(c * std::sqrt(static_cast<double>(hidden)) * factor / 32.0);
  return std::max(32, static_cast<int>(x) * 32);
}

constexpr char kRwkvChat[] = R"jinja({%- for m in messages -%}
{%- if m.role == 'system' -%}System{%- elif m.role == 'user' -%}User
{%- elif m.role == 'assistant' -%}Assistant{%- else -%}{{ m.role | capitalize }}{%- endif -%}
: {{ m.content | replace('\r\n', '\n') | replace('\n\n', '\n') | trim }}

{% endfor -%}
{%- if add_generation_prompt -%}Assistant:{%- endif -%})jinja";

}  // namespace

Architecture::ChatFormat Rwkv7Architecture::default_chat_format() const {
  return {kRwkvChat, {"\n\n"}};
}

absl::StatusOr<ModelConfig> Rwkv7Architecture::ParseConfig(
    absl::string_view /*text*/, const nlohmann::json& j, absl::string_view path,
    std::vector<std::string>* ignored) const {
  HfConfigReader r(j, path);
  ModelConfig c;
  c.architecture = std::string(name());
  c.attention_kind = AttentionKind::kSoftmax;  // no layer is softmax: layer_attention says rwkv7
  c.mlp_kind = MlpKind::kReluSquaredShift;
  c.norm_kind = NormKind::kLayer;
  c.max_position_embeddings = int64_t{1} << 40;  // a recurrent state has no position limit
  RETURN_IF_ERROR(r.Int("vocab_size", true, 1, 1 << 24, &c.vocab_size));
  RETURN_IF_ERROR(r.Int("hidden_size", true, 1, 1 << 16, &c.hidden_size));
  RETURN_IF_ERROR(r.Int("num_hidden_layers", true, 1, 1024, &c.num_hidden_layers));
  Rwkv7Shape& rw = c.rwkv;
  rw.head_dim = 64;
  RETURN_IF_ERROR(r.Int("head_dim", false, 1, 1024, &rw.head_dim));
  if (c.hidden_size % rw.head_dim != 0) {
    return r.Bad("head_dim",
                 absl::StrCat("= ", rw.head_dim, " does not divide hidden_size = ", c.hidden_size));
  }
  rw.heads = c.hidden_size / rw.head_dim;
  int heads = rw.heads;
  RETURN_IF_ERROR(r.Int("num_heads", false, 1, 1 << 16, &heads));
  if (heads != rw.heads) {
    return r.Bad("num_heads",
                 absl::StrCat("= ", heads, " is not hidden_size / head_dim = ", rw.heads));
  }
  const double factor = rw.head_dim / 64.0;
  rw.decay_rank = DefaultRank(2.5, c.hidden_size, factor);
  rw.a_rank = DefaultRank(2.5, c.hidden_size, factor);
  rw.v_rank = DefaultRank(1.7, c.hidden_size, factor);
  rw.gate_rank = DefaultRank(5.0, c.hidden_size, 1.0);
  RETURN_IF_ERROR(r.Int("decay_low_rank_dim", false, 1, 1 << 16, &rw.decay_rank));
  RETURN_IF_ERROR(r.Int("a_low_rank_dim", false, 1, 1 << 16, &rw.a_rank));
  RETURN_IF_ERROR(r.Int("v_low_rank_dim", false, 1, 1 << 16, &rw.v_rank));
  RETURN_IF_ERROR(r.Int("gate_low_rank_dim", false, 1, 1 << 16, &rw.gate_rank));
  double ratio = 4.0;
  RETURN_IF_ERROR(r.Positive("hidden_ratio", &ratio));
  const int64_t width = static_cast<int64_t>(c.hidden_size * ratio);
  c.intermediate_size = static_cast<int>(std::min<int64_t>((width + 31) / 32 * 32, 1 << 24));
  RETURN_IF_ERROR(r.Int("intermediate_size", false, 1, 1 << 24, &c.intermediate_size));
  double eps = 1e-5;
  RETURN_IF_ERROR(r.Positive("norm_eps", &eps));
  c.rms_norm_eps = static_cast<float>(eps);
  rw.fused_l2 = true;
  RETURN_IF_ERROR(r.Bool("fuse_norm", &rw.fused_l2));
  RETURN_IF_ERROR(r.RequireBool("norm_first", true));
  RETURN_IF_ERROR(r.RequireBool("norm_bias", true));
  if (const nlohmann::json* act = r.Get("hidden_act"); act != nullptr && *act != "sqrelu") {
    return r.Bad("hidden_act", absl::StrCat("= ", act->dump(), " is not supported (sqrelu only)"));
  }
  if (const nlohmann::json* attn = r.Get("attn"); attn != nullptr) {
    return r.Bad("attn", "is set: RWKV-7 hybrids with softmax-attention layers are not supported");
  }
  if (const nlohmann::json* vd = r.Get("value_dim"); vd != nullptr) {
    const nlohmann::json list = vd->is_array() ? *vd : nlohmann::json::array({*vd});
    for (const nlohmann::json& x : list) {
      if (x != c.hidden_size) {
        return r.Bad("value_dim", absl::StrCat("= ", vd->dump(), " (only hidden_size = ",
                                               c.hidden_size, " per layer is supported)"));
      }
    }
  }
  RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  int bos = -1;
  RETURN_IF_ERROR(r.Int("bos_token_id", false, 0, c.vocab_size - 1, &bos));
  c.bos_token_id = bos;
  RETURN_IF_ERROR(r.TokenIds("eos_token_id", c.vocab_size, &c.eos_token_ids));
  c.num_attention_heads = rw.heads;
  c.num_key_value_heads = rw.heads;
  c.head_dim = rw.head_dim;
  // Kernel choices and training switches: the math does not depend on them.
  r.Known({"architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
           "use_cache", "initializer_range", "pad_token_id", "_name_or_path", "attn_mode",
           "fuse_cross_entropy", "fuse_linear_cross_entropy", "use_l2warp",
           "max_position_embeddings", "fuse_swiglu"});
  *ignored = r.Unread();
  return c;
}

absl::Status Rwkv7Architecture::BindWeights(ModelConfig* config, const WeightFiles& files,
                                            TensorStore* store, ModelWeights* w) const {
  const ModelConfig& c = *config;
  const Rwkv7Shape& rw = c.rwkv;
  const int64_t D = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  const int64_t H = rw.heads, N = rw.head_dim;
  using K = HfTensor::Kind;
  std::vector<HfTensor> t;
  const float* embed = nullptr;
  const float* pre_w = nullptr;
  const float* pre_b = nullptr;
  t.push_back({K::kMatrix, {"model.embeddings.weight"}, {{V, D}}, &embed});
  t.push_back({K::kNorm, {"model.layers.0.pre_norm.weight"}, {{D}}, &pre_w});
  t.push_back({K::kVector, {"model.layers.0.pre_norm.bias"}, {{D}}, &pre_b});
  w->layers.assign(c.num_hidden_layers, LayerWeights{});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w->layers[i];
    LayerWeights::Rwkv7& x = l.rwkv;
    const std::string p = absl::StrCat("model.layers.", i, ".");
    const std::string a = p + "attn.";
    t.push_back({K::kNorm, {p + "attn_norm.weight"}, {{D}}, &l.attn_norm});
    t.push_back({K::kVector, {p + "attn_norm.bias"}, {{D}}, &l.attn_norm_bias});
    t.push_back({K::kNorm, {p + "ffn_norm.weight"}, {{D}}, &l.mlp_norm});
    t.push_back({K::kVector, {p + "ffn_norm.bias"}, {{D}}, &l.mlp_norm_bias});
    t.push_back({K::kVector,
                 {a + "x_r", a + "x_w", a + "x_k", a + "x_v", a + "x_a", a + "x_g"},
                 {{1, 1, D}, {1, 1, D}, {1, 1, D}, {1, 1, D}, {1, 1, D}, {1, 1, D}},
                 &x.mix});
    t.push_back({K::kVector, {a + "k_k"}, {{D}}, &x.k_k});
    t.push_back({K::kVector, {a + "k_a"}, {{D}}, &x.k_a});
    t.push_back({K::kVector, {a + "r_k"}, {{H, N}}, &x.r_k});
    t.push_back({K::kGemm, {a + "r_proj.weight"}, {{D, D}}, nullptr, &x.wr});
    t.push_back({K::kGemm, {a + "k_proj.weight"}, {{D, D}}, nullptr, &x.wk});
    t.push_back({K::kGemm, {a + "v_proj.weight"}, {{D, D}}, nullptr, &x.wv});
    t.push_back({K::kGemm, {a + "o_proj.weight"}, {{D, D}}, nullptr, &l.wo});
    struct Lora {
      const char* name;
      int64_t rank;
      GemmTensor* w1;
      GemmTensor* w2;
      const float** bias;
    };
    std::vector<Lora> loras = {{"w_lora", rw.decay_rank, &x.w_lora1, &x.w_lora2, &x.w_bias},
                               {"a_lora", rw.a_rank, &x.a_lora1, &x.a_lora2, &x.a_bias},
                               {"g_lora", rw.gate_rank, &x.g_lora1, &x.g_lora2, nullptr}};
    if (i > 0) loras.push_back({"v_lora", rw.v_rank, &x.v_lora1, &x.v_lora2, &x.v_bias});
    for (const Lora& lo : loras) {
      const std::string q = a + lo.name + ".lora.";
      t.push_back({K::kGemm, {q + "0.weight"}, {{lo.rank, D}}, nullptr, lo.w1});
      t.push_back({K::kGemm, {q + "2.weight"}, {{D, lo.rank}}, nullptr, lo.w2});
      if (lo.bias != nullptr) t.push_back({K::kVector, {q + "2.bias"}, {{D}}, lo.bias});
    }
    t.push_back({K::kVector, {a + "g_norm.weight"}, {{D}}, &x.gn_w});
    t.push_back({K::kVector, {a + "g_norm.bias"}, {{D}}, &x.gn_b});
    t.push_back({K::kVector, {p + "ffn.x_k"}, {{D}}, &l.mlp_mix});
    t.push_back({K::kGemm, {p + "ffn.key.weight"}, {{F, D}}, nullptr, &l.w1});
    t.push_back({K::kGemm, {p + "ffn.value.weight"}, {{D, F}}, nullptr, &l.w2});
  }
  t.push_back({K::kNorm, {"model.norm.weight"}, {{D}}, &w->norm});
  t.push_back({K::kVector, {"model.norm.bias"}, {{D}}, &w->norm_bias});
  if (!c.tie_word_embeddings) {
    t.push_back({K::kMatrix, {"lm_head.weight"}, {{V, D}}, &w->lm_head});
  }
  RETURN_IF_ERROR(BindHfTensors(t, {}, class_names().front(), files, config, store));
  // Layer 0's pre_norm acts on the embedding row alone: fold it into a normed copy of the table.
  float* normed = store->NewF32(static_cast<size_t>(V * D));
  LayerNorm<Device::kCpu>(embed, pre_w, pre_b, V, D, c.rms_norm_eps, normed);
  w->embed = normed;
  w->lm_head = c.tie_word_embeddings ? embed : w->lm_head;
  return absl::OkStatus();
}

}  // namespace flatstate
