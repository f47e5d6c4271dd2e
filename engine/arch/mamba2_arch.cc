#include "engine/arch/mamba2_arch.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/arch/hf_config.h"
#include "engine/arch/hf_tensors.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

// time_step_limit: [lo, hi], each a number or Python's "Infinity" (which transformers' json.dumps
// writes for float("inf"); engine/arch/hf_config.h JsonFromPython turns it into a string).
absl::Status ReadTimeStepLimit(HfConfigReader& r, SsmShape* ssm) {
  ssm->dt_min = 0.f;
  ssm->dt_max = std::numeric_limits<float>::infinity();
  const nlohmann::json* v = r.Get("time_step_limit");
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array() || v->size() != 2) {
    return r.Bad("time_step_limit", "must be a list [min, max]");
  }
  double lim[2];
  for (int i = 0; i < 2; ++i) {
    const nlohmann::json& x = (*v)[i];
    if (x.is_number()) {
      lim[i] = x.get<double>();
    } else if (x == "Infinity") {
      lim[i] = std::numeric_limits<double>::infinity();
    } else {
      return r.Bad("time_step_limit", absl::StrCat("[", i, "] = ", x.dump(), " is not a number"));
    }
  }
  if (std::isnan(lim[0]) || std::isnan(lim[1]) || lim[0] < 0 || !std::isfinite(lim[0]) ||
      lim[1] <= lim[0]) {
    return r.Bad("time_step_limit", absl::StrCat("= ", v->dump(), " (want 0 <= min < max)"));
  }
  ssm->dt_min = static_cast<float>(lim[0]);
  ssm->dt_max = static_cast<float>(lim[1]);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> Mamba2Architecture::ParseConfig(
    absl::string_view /*text*/, const nlohmann::json& j, absl::string_view path,
    std::vector<std::string>* ignored) const {
  HfConfigReader r(j, path);
  ModelConfig c;
  c.architecture = std::string(name());
  c.attention_kind = AttentionKind::kSoftmax;  // no layer is softmax: layer_attention says ssm
  c.mlp_kind = MlpKind::kNone;
  c.max_position_embeddings = int64_t{1} << 40;  // a recurrent state has no position limit
  c.rms_norm_eps = 1e-5f;
  RETURN_IF_ERROR(r.Int("vocab_size", true, 1, 1 << 24, &c.vocab_size));
  RETURN_IF_ERROR(r.Int("hidden_size", true, 1, 1 << 16, &c.hidden_size));
  RETURN_IF_ERROR(r.Int("num_hidden_layers", true, 1, 1024, &c.num_hidden_layers));
  SsmShape& s = c.ssm;
  s.state_size = 128;
  s.heads = 128;
  s.head_dim = 64;
  s.groups = 8;
  s.conv_kernel = 4;
  int expand = 2;
  RETURN_IF_ERROR(r.Int("state_size", false, 1, 4096, &s.state_size));
  RETURN_IF_ERROR(r.Int("expand", false, 1, 64, &expand));
  RETURN_IF_ERROR(r.Int("num_heads", false, 1, 65536, &s.heads));
  RETURN_IF_ERROR(r.Int("head_dim", false, 1, 4096, &s.head_dim));
  RETURN_IF_ERROR(r.Int("n_groups", false, 1, 65536, &s.groups));
  RETURN_IF_ERROR(r.Int("conv_kernel", false, 1, 64, &s.conv_kernel));
  RETURN_IF_ERROR(r.Bool("use_conv_bias", &s.conv_bias));
  if (s.inner() != int64_t{expand} * c.hidden_size) {
    return r.Bad("num_heads",
                 absl::StrCat("* head_dim = ", s.heads, " * ", s.head_dim,
                              " is not expand * hidden_size = ", expand, " * ", c.hidden_size));
  }
  if (s.heads % s.groups != 0) {
    return r.Bad("n_groups",
                 absl::StrCat("= ", s.groups, " does not divide num_heads = ", s.heads));
  }
  RETURN_IF_ERROR(ReadTimeStepLimit(r, &s));
  double eps = c.rms_norm_eps;
  RETURN_IF_ERROR(r.Positive("layer_norm_epsilon", &eps));
  c.rms_norm_eps = static_cast<float>(eps);
  RETURN_IF_ERROR(r.RequireBool("use_bias", false));
  RETURN_IF_ERROR(r.RequireBool("rms_norm", true));
  if (const nlohmann::json* act = r.Get("hidden_act"); act != nullptr && *act != "silu") {
    return r.Bad("hidden_act", absl::StrCat("= ", act->dump(), " is not supported (silu only)"));
  }
  RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  int bos = -1;
  RETURN_IF_ERROR(r.Int("bos_token_id", false, 0, c.vocab_size - 1, &bos));
  c.bos_token_id = bos;
  RETURN_IF_ERROR(r.TokenIds("eos_token_id", c.vocab_size, &c.eos_token_ids));
  // What the rest of the engine reads of any model: one "head" per SSM head.
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.heads;
  c.head_dim = s.head_dim;
  c.intermediate_size = static_cast<int>(s.inner());
  // Keys that do not change the math: fp32 residuals are what flatstate keeps anyway; chunk_size
  // is the torch path's scan chunk; the time_step_* keys and the rest only initialise training.
  r.Known({"architectures",        "model_type",
           "torch_dtype",          "dtype",
           "transformers_version", "use_cache",
           "initializer_range",    "pad_token_id",
           "_name_or_path",        "residual_in_fp32",
           "chunk_size",           "time_step_rank",
           "time_step_min",        "time_step_max",
           "time_step_floor",      "time_step_init_scheme",
           "time_step_scale",      "rescale_prenorm_residual",
           "tie_embeddings",       "norm_before_gate"});
  *ignored = r.Unread();
  return c;
}

absl::Status Mamba2Architecture::BindWeights(ModelConfig* config, const WeightFiles& files,
                                             TensorStore* store, ModelWeights* w) const {
  const ModelConfig& c = *config;
  const SsmShape& s = c.ssm;
  const int64_t D = c.hidden_size, V = c.vocab_size, H = s.heads;
  const int64_t inner = s.inner(), conv = s.conv_dim(), proj = inner + conv + H;
  using K = HfTensor::Kind;
  std::vector<HfTensor> t;
  t.push_back({K::kMatrix, {"backbone.embeddings.weight"}, {{V, D}}, &w->embed});
  w->layers.assign(c.num_hidden_layers, LayerWeights{});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w->layers[i];
    const std::string p = absl::StrCat("backbone.layers.", i, ".");
    const std::string m = p + "mixer.";
    t.push_back({K::kNorm, {p + "norm.weight"}, {{D}}, &l.attn_norm});
    // in_proj's rows are z | xBC | dt: xBC is one GEMM (the conv's input), z | dt the other.
    t.push_back(
        {K::kGemm, {m + "in_proj.weight"}, {{proj, D}}, nullptr, &l.wqkv, {{{inner, conv}}}});
    t.push_back({K::kGemm,
                 {m + "in_proj.weight"},
                 {{proj, D}},
                 nullptr,
                 &l.wzba,
                 {{{0, inner}, {inner + conv, H}}}});
    t.push_back({K::kVector, {m + "conv1d.weight"}, {{conv, 1, s.conv_kernel}}, &l.conv});
    if (s.conv_bias) t.push_back({K::kVector, {m + "conv1d.bias"}, {{conv}}, &l.conv_bias});
    t.push_back({K::kVector, {m + "dt_bias"}, {{H}}, &l.dt_bias});
    t.push_back({K::kVector, {m + "A_log"}, {{H}}, &l.A_log});
    t.push_back({K::kVector, {m + "D"}, {{H}}, &l.ssm_D});
    t.push_back({K::kNorm, {m + "norm.weight"}, {{inner}}, &l.delta_norm});
    t.push_back({K::kGemm, {m + "out_proj.weight"}, {{D, inner}}, nullptr, &l.wo});
  }
  t.push_back({K::kNorm, {"backbone.norm_f.weight"}, {{D}}, &w->norm});
  if (!c.tie_word_embeddings) {
    t.push_back({K::kMatrix, {"lm_head.weight"}, {{V, D}}, &w->lm_head});
  }
  RETURN_IF_ERROR(BindHfTensors(t, {}, class_names().front(), files, config, store));
  if (c.tie_word_embeddings) w->lm_head = w->embed;
  return absl::OkStatus();
}

}  // namespace flatstate
