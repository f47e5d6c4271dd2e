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

// The tensor table as ExpectedTensors for the loader: each entry bound to its ModelWeights field,
// the GEMM weights with their stored layout (and scale tensors) for torch_dtype.
std::vector<Expected> ExpectedTensors(const ModelConfig& c, ModelWeights* w) {
  using R = FlatstateTensor::Role;
  const TorchDtype d = c.torch_dtype;
  std::vector<Expected> e;
  w->layers.assign(c.num_hidden_layers, LayerWeights{});
  for (const FlatstateTensor& t : FlatstateTensorTable(c)) {
    LayerWeights* l = t.layer >= 0 ? &w->layers[t.layer] : nullptr;
    const float** dest = nullptr;
    GemmTensor* gemm = nullptr;
    switch (t.role) {
      case R::kEmbed:
        dest = &w->embed;
        break;
      case R::kAttnNorm:
        dest = &l->attn_norm;
        break;
      case R::kConv:
        dest = &l->conv;
        break;
      case R::kWqkv:
        gemm = &l->wqkv;
        break;
      case R::kWo:
        gemm = &l->wo;
        break;
      case R::kDecayLogit:
        dest = &l->decay_logit;
        break;
      case R::kFeatureProj:
        dest = &l->feature_proj;
        break;
      case R::kFeatureLogScale:
        dest = &l->feature_log_scale;
        break;
      case R::kGateWeight:
        dest = &l->gate_weight;
        break;
      case R::kGateBias:
        dest = &l->gate_bias;
        break;
      case R::kMlpNorm:
        dest = &l->mlp_norm;
        break;
      case R::kW1:
        gemm = &l->w1;
        break;
      case R::kW2:
        gemm = &l->w2;
        break;
      case R::kNorm:
        dest = &w->norm;
        break;
      case R::kLmHead:
        dest = &w->lm_head;
        break;
    }
    if (t.gemm) {
      AddGemm(&e, d, t.name, t.shape[0], t.shape[1], gemm);
    } else {
      e.push_back({t.name, t.shape, dest});
    }
  }
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
                                                TensorStore* /*store*/, ModelWeights* w) const {
  const ModelConfig& c = *config;
  const std::string& weights_path = files.description();
  const std::string config_path =
      absl::StrCat(weights_path.substr(0, weights_path.find_last_of('/') + 1), "config.json");
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
              : absl::StrCat(": the per-block scales of the ", TorchDtypeName(c.torch_dtype),
                             " weight '", e.scale_of, "'"),
          ")"));
    }
    if (t->dtype != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unsupported dtype '", t->dtype, "' (expected ", want,
                       DtypeMismatch(e, t->dtype, c, config_path), ")"));
    }
    if (t->shape != e.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": expected shape ", ShapeString(e.shape), ", got ", ShapeString(t->shape)));
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
