#include "engine/arch/llama_arch.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/arch/hf_config.h"
#include "engine/arch/hf_tensors.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

absl::Status ReadRopeScaling(HfConfigReader& r, ModelConfig* c) {
  const nlohmann::json* rs = r.Get("rope_scaling");
  if (rs == nullptr) return absl::OkStatus();
  if (!rs->is_object()) return r.Bad("rope_scaling", "must be null or an object");
  auto type_it = rs->find("rope_type");
  if (type_it == rs->end()) type_it = rs->find("type");
  const std::string type =
      type_it != rs->end() && type_it->is_string() ? type_it->get<std::string>() : "";
  auto num = [&](const char* key, bool required, double* out) -> absl::Status {
    auto it = rs->find(key);
    if (it == rs->end() || it->is_null()) {
      return required ? r.Bad(absl::StrCat("rope_scaling.", key),
                              absl::StrCat("is missing (rope_type ", type, " needs it)"))
                      : absl::OkStatus();
    }
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() <= 0) {
      return r.Bad(absl::StrCat("rope_scaling.", key), "must be a finite number > 0");
    }
    *out = it->get<double>();
    return absl::OkStatus();
  };
  RopeScaling& s = c->rope_scaling;
  if (type == "default") return absl::OkStatus();
  if (type == "linear") {
    s.type = RopeScalingType::kLinear;
    return num("factor", true, &s.factor);
  }
  if (type == "llama3") {
    s.type = RopeScalingType::kLlama3;
    RETURN_IF_ERROR(num("factor", true, &s.factor));
    RETURN_IF_ERROR(num("low_freq_factor", true, &s.low_freq_factor));
    RETURN_IF_ERROR(num("high_freq_factor", true, &s.high_freq_factor));
    RETURN_IF_ERROR(
        num("original_max_position_embeddings", true, &s.original_max_position_embeddings));
    if (!(s.high_freq_factor > s.low_freq_factor)) {
      return r.Bad("rope_scaling.high_freq_factor", "must be greater than low_freq_factor");
    }
    return absl::OkStatus();
  }
  return r.Bad("rope_scaling.rope_type",
               absl::StrCat("'", type, "' is not supported (supported: default, linear, llama3)"));
}

}  // namespace

absl::StatusOr<ModelConfig> LlamaArchitecture::ParseConfig(
    absl::string_view /*text*/, const nlohmann::json& j, absl::string_view path,
    std::vector<std::string>* ignored) const {
  HfConfigReader r(j, path);
  ModelConfig c;
  c.architecture = std::string(name());
  c.attention_kind = AttentionKind::kSoftmax;
  c.mlp_kind = MlpKind::kSwiGlu;
  c.rms_norm_eps = 1e-6f;
  c.max_position_embeddings = 2048;
  RETURN_IF_ERROR(ReadDecoderBasics(r, &c));
  c.head_dim = family_ == Family::kQwen3 ? 128 : 0;  // transformers' Qwen3Config default
  RETURN_IF_ERROR(r.Int("head_dim", false, 2, 1024, &c.head_dim));
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return r.Bad("hidden_size",
                   absl::StrCat("= ", c.hidden_size, " is not divisible by num_attention_heads = ",
                                c.num_attention_heads, " (and head_dim is absent)"));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) return r.Bad("head_dim", absl::StrCat("= ", c.head_dim, " is odd"));
  double theta = c.rope_theta, partial = 1.0;
  RETURN_IF_ERROR(r.Positive("rope_theta", &theta));
  RETURN_IF_ERROR(r.Positive("partial_rotary_factor", &partial));
  c.rope_theta = static_cast<float>(theta);
  c.rotary_dim = static_cast<int>(c.head_dim * partial);
  if (partial > 1 || c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
    return r.Bad("partial_rotary_factor",
                 absl::StrCat("= ", partial, " gives rotary_dim ", c.rotary_dim,
                              " (must be even, >= 2 and <= head_dim ", c.head_dim, ")"));
  }
  RETURN_IF_ERROR(ReadRopeScaling(r, &c));
  const bool qwen2 = family_ == Family::kQwen2;
  bool attention_bias = qwen2;
  if (!qwen2) RETURN_IF_ERROR(r.Bool("attention_bias", &attention_bias));
  c.attention_bias = attention_bias;
  c.qk_norm = family_ == Family::kQwen3;
  RETURN_IF_ERROR(r.Bool("mlp_bias", &c.mlp_bias));
  RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  if (const nlohmann::json* act = r.Get("hidden_act"); act != nullptr && *act != "silu") {
    return r.Bad("hidden_act", absl::StrCat("= ", act->dump(), " is not supported (silu only)"));
  }
  if (family_ != Family::kLlama) {
    bool sliding = false;
    RETURN_IF_ERROR(r.Bool("use_sliding_window", &sliding));
    if (sliding) {
      return r.Bad("use_sliding_window", "= true is not supported (full attention only)");
    }
    r.Known({"sliding_window", "max_window_layers"});
  } else if (const nlohmann::json* sw = r.Get("sliding_window"); sw != nullptr) {
    // Mistral: a window shorter than the context changes the math past it.
    if (!sw->is_number_integer() || sw->get<int64_t>() < c.max_position_embeddings) {
      return r.Bad("sliding_window", absl::StrCat("= ", sw->dump(),
                                                  " is not supported (full attention only: null "
                                                  "or >= max_position_embeddings)"));
    }
  }
  if (const nlohmann::json* lt = r.Get("layer_types"); lt != nullptr) {
    if (!lt->is_array()) return r.Bad("layer_types", "must be a list");
    for (const nlohmann::json& t : *lt) {
      if (t != "full_attention") {
        return r.Bad("layer_types", absl::StrCat("holds ", t.dump(), " (", name(),
                                                 " supports full_attention layers only)"));
      }
    }
  }
  r.Known({"architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
           "use_cache", "initializer_range", "pad_token_id", "attention_dropout", "pretraining_tp",
           "_name_or_path"});
  *ignored = r.Unread();
  return c;
}

absl::Status LlamaArchitecture::BindWeights(ModelConfig* config, const WeightFiles& files,
                                            TensorStore* store, ModelWeights* w) const {
  const ModelConfig& c = *config;
  const int64_t D = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  const int64_t Q = c.q_dim(), KV = c.kv_dim();
  using K = HfTensor::Kind;
  std::vector<HfTensor> t;
  t.push_back({K::kMatrix, {"model.embed_tokens.weight"}, {{V, D}}, &w->embed});
  w->layers.assign(c.num_hidden_layers, LayerWeights{});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w->layers[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    const std::string a = p + "self_attn.", m = p + "mlp.";
    t.push_back({K::kNorm, {p + "input_layernorm.weight"}, {{D}}, &l.attn_norm});
    t.push_back({K::kGemm,
                 {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                 {{Q, D}, {KV, D}, {KV, D}},
                 nullptr,
                 &l.wqkv});
    if (c.attention_bias) {
      t.push_back({K::kVector,
                   {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"},
                   {{Q}, {KV}, {KV}},
                   &l.bqkv});
    }
    if (c.qk_norm) {
      t.push_back({K::kNorm, {a + "q_norm.weight"}, {{c.head_dim}}, &l.q_norm});
      t.push_back({K::kNorm, {a + "k_norm.weight"}, {{c.head_dim}}, &l.k_norm});
    }
    t.push_back({K::kGemm, {a + "o_proj.weight"}, {{D, Q}}, nullptr, &l.wo});
    if (c.attention_bias && family_ != Family::kQwen2) {
      t.push_back({K::kVector, {a + "o_proj.bias"}, {{D}}, &l.bo});
    }
    t.push_back({K::kNorm, {p + "post_attention_layernorm.weight"}, {{D}}, &l.mlp_norm});
    t.push_back({K::kGemm,
                 {m + "gate_proj.weight", m + "up_proj.weight"},
                 {{F, D}, {F, D}},
                 nullptr,
                 &l.w1});
    t.push_back({K::kGemm, {m + "down_proj.weight"}, {{D, F}}, nullptr, &l.w2});
    if (c.mlp_bias) {
      t.push_back({K::kVector, {m + "gate_proj.bias", m + "up_proj.bias"}, {{F}, {F}}, &l.b1});
      t.push_back({K::kVector, {m + "down_proj.bias"}, {{D}}, &l.b2});
    }
  }
  t.push_back({K::kNorm, {"model.norm.weight"}, {{D}}, &w->norm});
  if (!c.tie_word_embeddings) {
    t.push_back({K::kMatrix, {"lm_head.weight"}, {{V, D}}, &w->lm_head});
  }
  RETURN_IF_ERROR(
      BindHfTensors(t, {"rotary_emb.inv_freq"}, class_names().front(), files, config, store));
  if (c.tie_word_embeddings) w->lm_head = w->embed;
  return absl::OkStatus();
}

}  // namespace flatstate
