#include "engine/arch/fla_common.h"

#include <cmath>
#include <cstdint>
#include <set>

#include "absl/strings/str_cat.h"
#include "engine/util/status_macros.h"

namespace flatstate {

absl::Status ReadFlaNumber(HfConfigReader& r, const std::string& key, double* out) {
  const nlohmann::json* v = r.Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number() || !std::isfinite(v->get<double>())) {
    return r.Bad(key, absl::StrCat("= ", v->dump(), " is not a finite number"));
  }
  *out = v->get<double>();
  return absl::OkStatus();
}

absl::Status RequireFlaNull(HfConfigReader& r, const std::string& key, absl::string_view why) {
  if (const nlohmann::json* v = r.Get(key); v != nullptr) {
    return r.Bad(key, absl::StrCat("= ", v->dump(), ": ", why));
  }
  return absl::OkStatus();
}

absl::Status ReadFlaCommon(HfConfigReader& r, ModelConfig* c) {
  c->attention_kind = AttentionKind::kSoftmax;  // no layer is softmax: layer_attention decides
  c->mlp_kind = MlpKind::kSwiGlu;
  c->max_position_embeddings = int64_t{1} << 40;  // a recurrent state has no position limit
  RETURN_IF_ERROR(r.Int("vocab_size", true, 1, 1 << 24, &c->vocab_size));
  RETURN_IF_ERROR(r.Int("hidden_size", true, 1, 1 << 16, &c->hidden_size));
  RETURN_IF_ERROR(r.Int("num_hidden_layers", true, 1, 1024, &c->num_hidden_layers));
  RETURN_IF_ERROR(RequireFlaNull(r, "attnres_block_size", "attention residuals are not supported"));
  if (const nlohmann::json* act = r.Get("hidden_act"); act != nullptr && *act != "swish") {
    return r.Bad("hidden_act", absl::StrCat("= ", act->dump(), " is not supported (swish only)"));
  }
  // fla.modules.GatedMLP: intermediate_size, else from hidden_ratio.
  double ratio = 4;
  RETURN_IF_ERROR(ReadFlaNumber(r, "hidden_ratio", &ratio));
  if (r.Get("intermediate_size") != nullptr) {
    RETURN_IF_ERROR(r.Int("intermediate_size", true, 1, 1 << 20, &c->intermediate_size));
  } else {
    const double raw = c->hidden_size * ratio * 2 / 3;  // Python's order of operations
    if (!(raw >= 1) || raw > (1 << 20)) {
      return r.Bad("hidden_ratio", absl::StrCat("= ", ratio, " gives no valid intermediate size"));
    }
    const int64_t n = static_cast<int64_t>(raw);
    c->intermediate_size = static_cast<int>(256 * ((n + 255) / 256));
  }
  double eps = 1e-6;
  RETURN_IF_ERROR(r.Positive("norm_eps", &eps));
  c->rms_norm_eps = static_cast<float>(eps);
  RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c->tie_word_embeddings));
  int bos = -1;
  RETURN_IF_ERROR(r.Int("bos_token_id", false, 0, c->vocab_size - 1, &bos));
  c->bos_token_id = bos;
  RETURN_IF_ERROR(r.TokenIds("eos_token_id", c->vocab_size, &c->eos_token_ids));
  // fuse_norm only picks fused kernels for the block's norms (same math); the entries read it
  // where it also names a tensor.
  r.Known({"architectures", "model_type", "torch_dtype", "dtype", "transformers_version",
           "use_cache", "initializer_range", "pad_token_id", "_name_or_path", "attn_mode",
           "fuse_swiglu", "fuse_cross_entropy", "fuse_linear_cross_entropy", "use_l2warp",
           "max_position_embeddings", "fuse_norm"});
  return absl::OkStatus();
}

namespace {

// One attn spec's math keys (the layers aside).
struct AttnSpec {
  int heads = 0, kv_heads = 0;
  bool qkv_bias = false;
  double rope_theta = 10000.0;
};

absl::Status ReadAttnSpec(HfConfigReader& r, const nlohmann::json& spec, const std::string& at,
                          int layers, std::set<int>* assigned, ModelConfig* c, AttnSpec* out,
                          std::vector<std::string>* ignored) {
  if (!spec.is_object()) return r.Bad(at, "must be an object");
  auto bad = [&](absl::string_view key, absl::string_view why) {
    return r.Bad(absl::StrCat(at, ".", key), why);
  };
  auto positive_int = [&](absl::string_view key, int* v) -> absl::Status {
    const nlohmann::json& x = spec.at(std::string(key));
    if (!x.is_number_integer() || x.get<int64_t>() < 1 || x.get<int64_t>() > 4096) {
      return bad(key, absl::StrCat("= ", x.dump(), " is not an integer in [1, 4096]"));
    }
    *v = static_cast<int>(x.get<int64_t>());
    return absl::OkStatus();
  };
  for (const char* key : {"layers", "num_heads"}) {
    if (!spec.contains(key)) return bad(key, "is missing");
  }
  const nlohmann::json& ls = spec.at("layers");
  if (!ls.is_array()) return bad("layers", "must be a list of layer indices");
  for (const nlohmann::json& x : ls) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= layers) {
      return bad("layers",
                 absl::StrCat("contains ", x.dump(), " (layer indices are in [0, ", layers, "))"));
    }
    const int i = static_cast<int>(x.get<int64_t>());
    if (!assigned->insert(i).second) {
      return bad("layers", absl::StrCat("assigns layer ", i, " twice"));
    }
    c->softmax_layer[i] = true;
  }
  RETURN_IF_ERROR(positive_int("num_heads", &out->heads));
  out->kv_heads = out->heads;
  if (spec.contains("num_kv_heads") && !spec.at("num_kv_heads").is_null()) {
    RETURN_IF_ERROR(positive_int("num_kv_heads", &out->kv_heads));
  }
  if (out->heads % out->kv_heads != 0) {
    return bad("num_kv_heads",
               absl::StrCat("= ", out->kv_heads, " does not divide num_heads = ", out->heads));
  }
  if (c->hidden_size % out->heads != 0 || (c->hidden_size / out->heads) % 2 != 0) {
    return bad("num_heads", absl::StrCat("= ", out->heads, " gives no even head_dim (hidden_size ",
                                         c->hidden_size, " / num_heads)"));
  }
  if (spec.contains("qkv_bias")) {
    if (!spec.at("qkv_bias").is_boolean()) return bad("qkv_bias", "must be a boolean");
    out->qkv_bias = spec.at("qkv_bias").get<bool>();
  }
  if (spec.contains("window_size") && !spec.at("window_size").is_null()) {
    return bad("window_size", absl::StrCat("= ", spec.at("window_size").dump(),
                                           ": sliding-window softmax layers are not supported "
                                           "(null only)"));
  }
  if (spec.contains("rope_theta")) {
    const nlohmann::json& t = spec.at("rope_theta");
    // fp32 in the engine: a value that rounds to 0 or overflows there is refused too.
    if (!t.is_number() || !std::isfinite(static_cast<float>(t.get<double>())) ||
        !(static_cast<float>(t.get<double>()) > 0)) {
      return bad("rope_theta", absl::StrCat("= ", t.dump(), " is not a finite fp32 number > 0"));
    }
    out->rope_theta = t.get<double>();
  }
  for (const auto& [key, value] : spec.items()) {
    if (key != "layers" && key != "num_heads" && key != "num_kv_heads" && key != "qkv_bias" &&
        key != "window_size" && key != "rope_theta") {
      ignored->push_back(absl::StrCat("attn.", key));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadFlaAttn(HfConfigReader& r, ModelConfig* c, std::vector<std::string>* ignored) {
  const nlohmann::json* attn = r.Get("attn");
  if (attn == nullptr) return absl::OkStatus();
  if (!attn->is_object() && !attn->is_array()) {
    return r.Bad("attn", "must be null, a spec object or a list of them");
  }
  const bool one = attn->is_object();
  c->softmax_layer.assign(c->num_hidden_layers, false);
  std::set<int> assigned;
  AttnSpec first;
  for (size_t n = 0; n < (one ? 1 : attn->size()); ++n) {
    const std::string at = one ? std::string("attn") : absl::StrCat("attn[", n, "]");
    AttnSpec s;
    RETURN_IF_ERROR(ReadAttnSpec(r, one ? *attn : (*attn)[n], at, c->num_hidden_layers, &assigned,
                                 c, &s, ignored));
    if (n == 0) {
      first = s;
    } else if (s.heads != first.heads || s.kv_heads != first.kv_heads ||
               s.qkv_bias != first.qkv_bias || s.rope_theta != first.rope_theta) {
      return r.Bad(at,
                   "differs from attn[0] in num_heads, num_kv_heads, qkv_bias or rope_theta "
                   "(the softmax layers must share one shape)");
    }
  }
  if (assigned.empty()) return absl::OkStatus();
  c->num_attention_heads = first.heads;
  c->num_key_value_heads = first.kv_heads;
  c->head_dim = c->hidden_size / first.heads;
  c->rotary_dim = 0;  // fla's RotaryEmbedding(dim=head_dim)
  c->rope_theta = static_cast<float>(first.rope_theta);
  c->attention_bias = first.qkv_bias;
  return absl::OkStatus();
}

void AddFlaAttnTensors(const ModelConfig& c, int i, LayerWeights* l, std::vector<HfTensor>* t) {
  using K = HfTensor::Kind;
  const int64_t D = c.hidden_size, Q = c.q_dim(), KV = c.kv_dim();
  const std::string a = absl::StrCat("model.layers.", i, ".attn.");
  t->push_back({K::kGemm,
                {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                {{Q, D}, {KV, D}, {KV, D}},
                nullptr,
                &l->wqkv});
  if (c.attention_bias) {
    t->push_back({K::kVector,
                  {a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"},
                  {{Q}, {KV}, {KV}},
                  &l->bqkv});
  }
  t->push_back({K::kGemm, {a + "o_proj.weight"}, {{D, Q}}, nullptr, &l->wo});
}

void AddFlaBlockTensors(const ModelConfig& c, int i, LayerWeights* l, std::vector<HfTensor>* t) {
  using K = HfTensor::Kind;
  const int64_t D = c.hidden_size, F = c.intermediate_size;
  const std::string p = absl::StrCat("model.layers.", i, ".");
  const std::string m = p + "mlp.";
  t->push_back({K::kNorm, {p + "attn_norm.weight"}, {{D}}, &l->attn_norm});
  t->push_back({K::kNorm, {p + "mlp_norm.weight"}, {{D}}, &l->mlp_norm});
  t->push_back({K::kGemm,
                {m + "gate_proj.weight", m + "up_proj.weight"},
                {{F, D}, {F, D}},
                nullptr,
                &l->w1});
  t->push_back({K::kGemm, {m + "down_proj.weight"}, {{D, F}}, nullptr, &l->w2});
}

void AddFlaModelTensors(const ModelConfig& c, ModelWeights* w, std::vector<HfTensor>* t) {
  using K = HfTensor::Kind;
  const int64_t D = c.hidden_size, V = c.vocab_size;
  t->push_back({K::kMatrix, {"model.embeddings.weight"}, {{V, D}}, &w->embed});
  t->push_back({K::kNorm, {"model.norm.weight"}, {{D}}, &w->norm});
  if (!c.tie_word_embeddings) {
    t->push_back({K::kMatrix, {"lm_head.weight"}, {{V, D}}, &w->lm_head});
  }
}

absl::Status BindFlaModel(const std::vector<HfTensor>& t, absl::string_view family,
                          const WeightFiles& files, ModelConfig* config, TensorStore* store,
                          ModelWeights* w) {
  RETURN_IF_ERROR(BindHfTensors(t, {}, family, files, config, store));
  if (config->tie_word_embeddings) w->lm_head = w->embed;
  return absl::OkStatus();
}

absl::Status FinishFlaConfig(HfConfigReader& r, ModelConfig* c, std::vector<std::string>* ignored) {
  std::vector<std::string> attn_ignored;
  RETURN_IF_ERROR(ReadFlaAttn(r, c, &attn_ignored));
  *ignored = r.Unread();
  ignored->insert(ignored->end(), attn_ignored.begin(), attn_ignored.end());
  return absl::OkStatus();
}

void AddFlaDeltaQkvTensors(const std::string& a, const DeltaNetShape& dn, int64_t D,
                           LayerWeights* l, std::vector<HfTensor>* t) {
  using Kind = HfTensor::Kind;
  const int64_t Kw = dn.key_width(), Vw = dn.value_width(), K = dn.conv_kernel;
  t->push_back({Kind::kGemm,
                {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                {{Kw, D}, {Kw, D}, {Vw, D}},
                nullptr,
                &l->wqkv});
  if (K > 0) {
    t->push_back({Kind::kVector,
                  {a + "q_conv1d.weight", a + "k_conv1d.weight", a + "v_conv1d.weight"},
                  {{Kw, 1, K}, {Kw, 1, K}, {Vw, 1, K}},
                  &l->conv});
  }
}

}  // namespace flatstate
