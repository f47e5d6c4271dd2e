#include "engine/arch/qwen35_arch.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/arch/hf_config.h"
#include "engine/arch/hf_tensors.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

// RoPE: rope_parameters {rope_type "default", rope_theta, partial_rotary_factor} (transformers
// 5), else the same keys at the top level (older files). Qwen3.5's mrope_section /
// mrope_interleaved give every section the same position for text: plain RoPE.
absl::Status ReadRope(HfConfigReader& r, ModelConfig* c) {
  double theta = 10000000.0, partial = 0.25;
  if (const nlohmann::json* rp = r.Get("rope_parameters"); rp != nullptr) {
    if (!rp->is_object()) return r.Bad("rope_parameters", "must be an object");
    HfConfigReader inner(*rp, "rope_parameters");
    if (const nlohmann::json* t = inner.Get("rope_type"); t != nullptr && *t != "default") {
      return r.Bad("rope_parameters.rope_type",
                   absl::StrCat("= ", t->dump(), " is not supported (default only)"));
    }
    if (absl::Status s = inner.Positive("rope_theta", &theta); !s.ok()) {
      return r.Bad("rope_parameters.rope_theta", "must be a finite number > 0");
    }
    if (absl::Status s = inner.Positive("partial_rotary_factor", &partial); !s.ok()) {
      return r.Bad("rope_parameters.partial_rotary_factor", "must be a finite number > 0");
    }
  } else {
    RETURN_IF_ERROR(r.Positive("rope_theta", &theta));
    RETURN_IF_ERROR(r.Positive("partial_rotary_factor", &partial));
  }
  c->rope_theta = static_cast<float>(theta);
  c->rotary_dim = static_cast<int>(c->head_dim * partial);
  if (partial > 1 || c->rotary_dim < 2 || c->rotary_dim % 2 != 0) {
    return r.Bad("partial_rotary_factor",
                 absl::StrCat("= ", partial, " gives rotary_dim ", c->rotary_dim,
                              " (must be even, >= 2 and <= head_dim ", c->head_dim, ")"));
  }
  return absl::OkStatus();
}

absl::Status ReadLayerTypes(HfConfigReader& r, ModelConfig* c) {
  c->softmax_layer.assign(c->num_hidden_layers, false);
  if (const nlohmann::json* lt = r.Get("layer_types"); lt != nullptr) {
    if (!lt->is_array() || static_cast<int>(lt->size()) != c->num_hidden_layers) {
      return r.Bad(
          "layer_types",
          absl::StrCat("must be a list of num_hidden_layers = ", c->num_hidden_layers, " entries"));
    }
    for (int i = 0; i < c->num_hidden_layers; ++i) {
      const nlohmann::json& t = (*lt)[i];
      if (t != "linear_attention" && t != "full_attention") {
        return r.Bad("layer_types", absl::StrCat("[", i, "] = ", t.dump(),
                                                 " (linear_attention or full_attention)"));
      }
      c->softmax_layer[i] = t == "full_attention";
    }
    r.Known({"full_attention_interval"});
    return absl::OkStatus();
  }
  int interval = 4;
  RETURN_IF_ERROR(r.Int("full_attention_interval", false, 1, 1024, &interval));
  for (int i = 0; i < c->num_hidden_layers; ++i) c->softmax_layer[i] = (i + 1) % interval == 0;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> Qwen35Architecture::ParseConfig(
    absl::string_view /*text*/, const nlohmann::json& j, absl::string_view path,
    std::vector<std::string>* ignored) const {
  // The multimodal class keeps the text model's keys under text_config.
  HfConfigReader top(j, path);
  const nlohmann::json* text = top.Get("text_config");
  if (text != nullptr && !text->is_object()) return top.Bad("text_config", "must be an object");
  const std::string where =
      text != nullptr ? absl::StrCat(path, " text_config") : std::string(path);
  HfConfigReader r(text != nullptr ? *text : j, where);
  ModelConfig c;
  c.architecture = std::string(name());
  c.attention_kind = AttentionKind::kSoftmax;
  c.mlp_kind = MlpKind::kSwiGlu;
  c.norm_unit_offset = true;
  c.qk_norm = true;
  c.attn_output_gate = true;
  c.rms_norm_eps = 1e-6f;
  c.max_position_embeddings = 32768;
  RETURN_IF_ERROR(ReadDecoderBasics(r, &c));
  c.head_dim = 256;  // transformers' Qwen3NextConfig default
  RETURN_IF_ERROR(r.Int("head_dim", false, 2, 1024, &c.head_dim));
  if (c.head_dim % 2 != 0) return r.Bad("head_dim", absl::StrCat("= ", c.head_dim, " is odd"));
  RETURN_IF_ERROR(ReadRope(r, &c));

  DeltaNetShape& dn = c.delta;
  RETURN_IF_ERROR(r.Int("linear_num_key_heads", true, 1, 1024, &dn.key_heads));
  RETURN_IF_ERROR(r.Int("linear_num_value_heads", true, 1, 1024, &dn.value_heads));
  RETURN_IF_ERROR(r.Int("linear_key_head_dim", true, 1, 4096, &dn.key_dim));
  RETURN_IF_ERROR(r.Int("linear_value_head_dim", true, 1, 4096, &dn.value_dim));
  RETURN_IF_ERROR(r.Int("linear_conv_kernel_dim", true, 1, 64, &dn.conv_kernel));
  if (dn.value_heads % dn.key_heads != 0) {
    return r.Bad("linear_num_value_heads",
                 absl::StrCat("= ", dn.value_heads,
                              " is not a multiple of linear_num_key_heads = ", dn.key_heads));
  }
  RETURN_IF_ERROR(ReadLayerTypes(r, &c));
  RETURN_IF_ERROR(r.Bool("attn_output_gate", &c.attn_output_gate));
  bool bias = false;
  RETURN_IF_ERROR(r.Bool("attention_bias", &bias));
  if (bias) return r.Bad("attention_bias", "= true is not supported");
  RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  if (const nlohmann::json* act = r.Get("hidden_act"); act != nullptr && *act != "silu") {
    return r.Bad("hidden_act", absl::StrCat("= ", act->dump(), " is not supported (silu only)"));
  }
  // Keys that do not change the text model's math (the MTP head is not run).
  r.Known({"architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
           "use_cache", "initializer_range", "pad_token_id", "attention_dropout", "_name_or_path",
           "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings"});
  *ignored = r.Unread();
  if (text != nullptr) {
    for (std::string& k : *ignored) k = "text_config." + k;
    top.Known({"architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
               "vision_config", "image_token_id", "video_token_id", "vision_start_token_id",
               "vision_end_token_id", "tie_word_embeddings", "_name_or_path"});
    for (std::string& k : top.Unread()) ignored->push_back(std::move(k));
  }
  return c;
}

absl::Status Qwen35Architecture::BindWeights(ModelConfig* config, const WeightFiles& files,
                                             TensorStore* store, ModelWeights* w) const {
  const ModelConfig& c = *config;
  const DeltaNetShape& dn = c.delta;
  const int64_t D = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  const int64_t Q = c.q_dim(), KV = c.kv_dim(), hd = c.head_dim;
  const int64_t conv = dn.conv_dim(), Vw = dn.value_width(), Hv = dn.value_heads;
  // The multimodal checkpoint keeps the text model under model.language_model.
  const bool multimodal = files.Find("model.language_model.embed_tokens.weight").tensor != nullptr;
  const std::string P = multimodal ? "model.language_model." : "model.";
  using K = HfTensor::Kind;
  std::vector<HfTensor> t;
  t.push_back({K::kMatrix, {P + "embed_tokens.weight"}, {{V, D}}, &w->embed});
  w->layers.assign(c.num_hidden_layers, LayerWeights{});
  // q_proj's rows per head: [query hd | gate hd]; wqkv takes the queries, k, v, then the gates.
  std::vector<std::pair<int64_t, int64_t>> query_rows, gate_rows;
  for (int64_t h = 0; h < c.num_attention_heads; ++h) {
    query_rows.emplace_back(h * 2 * hd, hd);
    gate_rows.emplace_back(h * 2 * hd + hd, hd);
  }
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w->layers[i];
    const std::string p = absl::StrCat(P, "layers.", i, ".");
    const std::string m = p + "mlp.";
    t.push_back({K::kNorm, {p + "input_layernorm.weight"}, {{D}}, &l.attn_norm});
    if (c.layer_attention(i).delta) {
      const std::string a = p + "linear_attn.";
      t.push_back({K::kGemm, {a + "in_proj_qkv.weight"}, {{conv, D}}, nullptr, &l.wqkv});
      t.push_back({K::kGemm,
                   {a + "in_proj_z.weight", a + "in_proj_b.weight", a + "in_proj_a.weight"},
                   {{Vw, D}, {Hv, D}, {Hv, D}},
                   nullptr,
                   &l.wzba});
      t.push_back({K::kVector, {a + "conv1d.weight"}, {{conv, 1, dn.conv_kernel}}, &l.conv});
      t.push_back({K::kVector, {a + "A_log"}, {{Hv}}, &l.A_log});
      t.push_back({K::kVector, {a + "dt_bias"}, {{Hv}}, &l.dt_bias});
      t.push_back({K::kVector, {a + "norm.weight"}, {{dn.value_dim}}, &l.delta_norm});
      t.push_back({K::kGemm, {a + "out_proj.weight"}, {{D, Vw}}, nullptr, &l.wo});
    } else {
      const std::string a = p + "self_attn.";
      if (c.attn_output_gate) {
        t.push_back(
            {K::kGemm,
             {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight", a + "q_proj.weight"},
             {{2 * Q, D}, {KV, D}, {KV, D}, {2 * Q, D}},
             nullptr,
             &l.wqkv,
             {query_rows, {}, {}, gate_rows}});
      } else {
        t.push_back({K::kGemm,
                     {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                     {{Q, D}, {KV, D}, {KV, D}},
                     nullptr,
                     &l.wqkv});
      }
      t.push_back({K::kNorm, {a + "q_norm.weight"}, {{hd}}, &l.q_norm});
      t.push_back({K::kNorm, {a + "k_norm.weight"}, {{hd}}, &l.k_norm});
      t.push_back({K::kGemm, {a + "o_proj.weight"}, {{D, Q}}, nullptr, &l.wo});
    }
    t.push_back({K::kNorm, {p + "post_attention_layernorm.weight"}, {{D}}, &l.mlp_norm});
    t.push_back({K::kGemm,
                 {m + "gate_proj.weight", m + "up_proj.weight"},
                 {{F, D}, {F, D}},
                 nullptr,
                 &l.w1});
    t.push_back({K::kGemm, {m + "down_proj.weight"}, {{D, F}}, nullptr, &l.w2});
  }
  t.push_back({K::kNorm, {P + "norm.weight"}, {{D}}, &w->norm});
  if (!c.tie_word_embeddings) {
    t.push_back({K::kMatrix, {"lm_head.weight"}, {{V, D}}, &w->lm_head});
  }
  RETURN_IF_ERROR(BindHfTensors(t, {"rotary_emb.inv_freq"}, class_names().front(), files, config,
                                store, {"model.visual.", "mtp."}));
  if (c.tie_word_embeddings) w->lm_head = w->embed;
  return absl::OkStatus();
}

}  // namespace flatstate
