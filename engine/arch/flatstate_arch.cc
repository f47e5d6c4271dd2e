#include "engine/arch/flatstate_arch.h"

#include <cmath>
#include <set>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

struct Expected {
  std::string name;
  std::vector<int64_t> shape;
  const float** dest = nullptr;  // an F32 tensor
  GemmTensor* gemm = nullptr;    // or one of the layers' GEMM weights (F32, BF16, int8 or int4)
  std::string scale_of{};        // or the F32 scales of this quantised GEMM weight
};

bool Quantized(TorchDtype d) { return d == TorchDtype::kInt8 || d == TorchDtype::kInt4; }

// The safetensors dtype of the layers' GEMM weights (their quants, for int8 / int4).
const char* GemmDtype(TorchDtype d) {
  switch (d) {
    case TorchDtype::kBfloat16:
      return "BF16";
    case TorchDtype::kInt8:
      return "I8";
    case TorchDtype::kInt4:
      return "U8";
    case TorchDtype::kFloat32:
      break;
  }
  return "F32";
}

// Appends GEMM weight `name` [n, k]: as stored for torch_dtype d, and its scale tensor for int8 and
// int4 (docs/model-format.md, "Stored int8 and int4").
void AddGemm(std::vector<Expected>* e, TorchDtype d, const std::string& name, int64_t n, int64_t k,
             GemmTensor* t) {
  t->n = n;
  t->k = k;
  e->push_back({name, {n, d == TorchDtype::kInt4 ? (k + 1) / 2 : k}, nullptr, t});
  if (Quantized(d)) {
    e->push_back({name + std::string(kScaleSuffix),
                  {n, (k + kQuantBlock - 1) / kQuantBlock},
                  &t->scale,
                  nullptr,
                  name});
  }
}

// The naming table of flatstate_arch.h, in file order.
std::vector<Expected> ExpectedTensors(const ModelConfig& c, ModelWeights* w) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim;
  const int64_t F = c.intermediate_size, K = c.conv_kernel_size, V = c.vocab_size;
  const TorchDtype d = c.torch_dtype;
  std::vector<Expected> e;
  e.push_back({"embed.weight", {V, D}, &w->embed});
  w->layers.assign(c.num_hidden_layers, LayerWeights{});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w->layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    e.push_back({p + "attn_norm.weight", {D}, &l.attn_norm});
    if (c.has_conv()) e.push_back({p + "attn.conv", {D, K}, &l.conv});
    AddGemm(&e, d, p + "attn.wqkv.weight", 3 * D, D, &l.wqkv);
    AddGemm(&e, d, p + "attn.wo.weight", D, D, &l.wo);
    if (c.attention_kind == AttentionKind::kCosine) {
      e.push_back({p + "attn.decay_logit", {H}, &l.decay_logit});
    }
    if (c.attention_kind == AttentionKind::kFavor) {
      e.push_back({p + "attn.feature_proj", {c.favor_num_features, hd}, &l.feature_proj});
    }
    if (c.attention_kind == AttentionKind::kGated) {
      e.push_back({p + "attn.feature_proj", {c.rfa_num_features, hd}, &l.feature_proj});
      e.push_back({p + "attn.feature_log_scale", {H}, &l.feature_log_scale});
      e.push_back({p + "attn.gate.weight", {H, D}, &l.gate_weight});
      e.push_back({p + "attn.gate.bias", {H}, &l.gate_bias});
    }
    e.push_back({p + "mlp_norm.weight", {D}, &l.mlp_norm});
    AddGemm(&e, d, p + "mlp.w1.weight", F, D, &l.w1);
    AddGemm(&e, d, p + "mlp.w2.weight", D, F, &l.w2);
  }
  e.push_back({"norm.weight", {D}, &w->norm});
  e.push_back({"lm_head.weight", {V, D}, &w->lm_head});
  return e;
}

// Why tensor `e` may not have dtype `got` (`want` is the one it takes), for the message
// "unsupported dtype '<got>' (expected <want><why>)".
std::string DtypeMismatch(const Expected& e, const std::string& got, const ModelConfig& c,
                          const std::string& config_path) {
  if (!e.scale_of.empty()) {
    return absl::StrCat(": the per-block scales of the ", TorchDtypeName(c.torch_dtype),
                        " weight '", e.scale_of, "'");
  }
  if (e.gemm == nullptr) {
    return got == "BF16" ? ": only the layers' attn.wqkv, attn.wo, mlp.w1 and mlp.w2 weights may "
                           "be BF16; norms, embeddings, lm_head, conv, gate and feature tensors "
                           "are F32"
                         : "";
  }
  if (got == "BF16" || got == "F32" || got == "I8" || got == "U8") {
    return absl::StrCat(": ", config_path, " has torch_dtype \"",
                        std::string(TorchDtypeName(c.torch_dtype)),
                        "\", and the layers' GEMM weights are then all ", GemmDtype(c.torch_dtype),
                        c.torch_dtype == TorchDtype::kInt4   ? " (two int4 quants per byte)"
                        : c.torch_dtype == TorchDtype::kInt8 ? " (int8 quants)"
                                                             : "");
  }
  return "";
}

// Model::Load's value checks of a stored int8 / int4 GEMM weight: every quant in range (and an
// odd k's int4 pad nibble 8) and every scale finite and >= 0; errors name the file and tensor.
absl::Status CheckQuantized(const std::string& weights_path, const std::string& name, TorchDtype d,
                            const GemmTensor& t) {
  const std::string at = absl::StrCat(weights_path, ": tensor '", name, "': ");
  const int64_t nb = (t.k + kQuantBlock - 1) / kQuantBlock;
  for (int64_t j = 0; j < t.n; ++j) {
    for (int64_t b = 0; b < nb; ++b) {
      const float s = t.scale[j * nb + b];
      if (!std::isfinite(s) || s < 0.f) {
        return absl::InvalidArgumentError(absl::StrCat(weights_path, ": tensor '", name,
                                                       kScaleSuffix, "': scale ", s, " at [", j,
                                                       ", ", b, "] is not a finite number >= 0"));
      }
    }
  }
  if (d == TorchDtype::kInt8) {
    const int8_t* q = reinterpret_cast<const int8_t*>(t.q);
    for (int64_t i = 0; i < t.n * t.k; ++i) {
      if (q[i] == -128) {
        return absl::InvalidArgumentError(absl::StrCat(at, "quant -128 at [", i / t.k, ", ",
                                                       i % t.k,
                                                       "] is out of range (int8 quants are in "
                                                       "[-127, 127])"));
      }
    }
    return absl::OkStatus();
  }
  const int64_t row = (t.k + 1) / 2;
  for (int64_t j = 0; j < t.n; ++j) {
    for (int64_t i = 0; i < row; ++i) {
      const uint8_t byte = t.q[j * row + i];
      for (int half = 0; half < 2; ++half) {
        const int nibble = half == 0 ? byte & 15 : byte >> 4;
        const int64_t kk = 2 * i + half;
        if (kk == t.k && nibble != 8) {
          return absl::InvalidArgumentError(absl::StrCat(
              at, "the pad nibble of row ", j, " (high half of its last byte, k = ", t.k,
              " is odd) is ", nibble, ", expected 8 (a zero quant)"));
        }
        if (kk < t.k && nibble == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              at, "quant -8 (nibble 0) at [", j, ", ", kk,
              "] is out of range (int4 quants are in [-7, 7], stored as nibbles q + 8)"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> FlatstateArchitecture::ParseConfig(
    absl::string_view text, const nlohmann::json& /*j*/, absl::string_view path,
    std::vector<std::string>* /*ignored*/) const {
  return ParseModelConfig(text, path);
}

absl::Status FlatstateArchitecture::BindWeights(ModelConfig* config, const WeightFiles& files,
                                                TensorStore* /*store*/,
                                                ModelWeights* w) const {
  const ModelConfig& c = *config;
  const std::string& weights_path = files.description();
  const std::string config_path = absl::StrCat(
      weights_path.substr(0, weights_path.find_last_of('/') + 1), "config.json");
  const std::vector<Expected> expected = ExpectedTensors(c, w);
  std::set<std::string_view> names;
  for (const Expected& e : expected) {
    names.insert(e.name);
    const std::string where = absl::StrCat(weights_path, ": tensor '", e.name, "'");
    const TensorView* t = files.Find(e.name).tensor;
    const std::string want = e.gemm != nullptr ? GemmDtype(c.torch_dtype) : "F32";
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " is missing (expected ", want, " ", ShapeString(e.shape), " for attention_kind ",
          std::string(AttentionKindName(c.attention_kind)),
          e.scale_of.empty()
              ? ""
              : absl::StrCat(": the per-block scales of the ",
                             TorchDtypeName(c.torch_dtype), " weight '", e.scale_of, "'"),
          ")"));
    }
    if (t->dtype != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unsupported dtype '", t->dtype, "' (expected ", want,
                       DtypeMismatch(e, t->dtype, c, config_path), ")"));
    }
    if (t->shape != e.shape) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected shape ",
                                                     ShapeString(e.shape), ", got ",
                                                     ShapeString(t->shape)));
    }
    if (e.gemm == nullptr) {
      *e.dest = t->f32();
    } else if (want == "BF16") {
      e.gemm->bf16 = t->bf16();
    } else if (want == "F32") {
      e.gemm->f32 = t->f32();
    } else {
      e.gemm->q = t->data;
    }
  }
  if (Quantized(c.torch_dtype)) {
    for (const Expected& e : expected) {
      if (e.gemm == nullptr) continue;
      RETURN_IF_ERROR(CheckQuantized(weights_path, e.name, c.torch_dtype, *e.gemm));
    }
  }
  for (const WeightFiles::Found& f : files.All()) {
    const TensorView& t = *f.tensor;
    if (names.count(t.name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          weights_path, ": unexpected tensor '", t.name, "' for attention_kind ",
          std::string(AttentionKindName(c.attention_kind)), " with conv_kernel_size ",
          c.conv_kernel_size,
          absl::EndsWith(t.name, kScaleSuffix) && !Quantized(c.torch_dtype)
              ? absl::StrCat(" (scale tensors belong to torch_dtype \"int8\" or \"int4\"; ",
                             config_path, " has \"", TorchDtypeName(c.torch_dtype), "\")")
              : ""));
    }
      }

  return absl::OkStatus();
}

}  // namespace flatstate
