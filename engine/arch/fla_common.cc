#include "engine/arch/fla_common.h"

#include <cmath>
#include <cstdint>

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
  RETURN_IF_ERROR(RequireFlaNull(
      r, "attn", "hybrids with softmax-attention layers are not supported (null only)"));
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

}  // namespace flatstate
