#include "engine/model/model.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/safetensors.h"
#include "engine/util/sha256.h"
#include "engine/util/status_macros.h"

namespace flatstate {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::InternalError(msg);
  }
  std::string out;
  char buf[1 << 14];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::InternalError(absl::StrCat(path, ": read error"));
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

struct Expected {
  std::string name;
  std::vector<int64_t> shape;
  const float** dest = nullptr;  // an F32 tensor
  GemmTensor* gemm = nullptr;    // or one of the layers' GEMM weights (F32 or BF16)
};

// The naming table of model.h, in file order.
std::vector<Expected> ExpectedTensors(const ModelConfig& c, ModelWeights* w) {
  const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim;
  const int64_t F = c.intermediate_size, K = c.conv_kernel_size, V = c.vocab_size;
  std::vector<Expected> e;
  e.push_back({"embed.weight", {V, D}, &w->embed});
  w->layers.assign(c.num_hidden_layers, LayerWeights{});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w->layers[i];
    const std::string p = absl::StrCat("layers.", i, ".");
    e.push_back({p + "attn_norm.weight", {D}, &l.attn_norm});
    if (c.has_conv()) e.push_back({p + "attn.conv", {D, K}, &l.conv});
    e.push_back({p + "attn.wqkv.weight", {3 * D, D}, nullptr, &l.wqkv});
    e.push_back({p + "attn.wo.weight", {D, D}, nullptr, &l.wo});
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
    e.push_back({p + "mlp.w1.weight", {F, D}, nullptr, &l.w1});
    e.push_back({p + "mlp.w2.weight", {D, F}, nullptr, &l.w2});
  }
  e.push_back({"norm.weight", {D}, &w->norm});
  e.push_back({"lm_head.weight", {V, D}, &w->lm_head});
  return e;
}

// Why tensor `e` may not have dtype `got` (`want` is the one it takes), for the message
// "unsupported dtype '<got>' (expected <want><why>)".
std::string DtypeMismatch(const Expected& e, const std::string& got, const ModelConfig& c,
                          const std::string& config_path) {
  if (e.gemm == nullptr) {
    return got == "BF16" ? ": only the layers' attn.wqkv, attn.wo, mlp.w1 and mlp.w2 weights may "
                           "be BF16; norms, embeddings, lm_head, conv, gate and feature tensors "
                           "are F32"
                         : "";
  }
  if (got == "BF16" || got == "F32") {
    return absl::StrCat(": ", config_path, " has torch_dtype \"",
                        std::string(TorchDtypeName(c.torch_dtype)),
                        "\", and the layers' GEMM weights are then all ",
                        c.torch_dtype == TorchDtype::kBfloat16 ? "BF16" : "F32");
  }
  return "";
}

// "models/foo/" -> "models/foo"; "/" stays "/".
std::string StripTrailingSlashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

Model::~Model() = default;

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir) {
  std::unique_ptr<Model> m(new Model());
  m->dir_ = StripTrailingSlashes(dir.empty() ? std::string(".") : dir);
  const size_t slash = m->dir_.find_last_of('/');
  m->name_ = slash == std::string::npos ? m->dir_ : m->dir_.substr(slash + 1);
  const std::string prefix = m->dir_ == "/" ? "/" : m->dir_ + "/";
  const std::string config_path = prefix + "config.json";
  const std::string weights_path = prefix + "model.safetensors";

  ASSIGN_OR_RETURN(const std::string config_text, ReadWholeFile(config_path));
  ASSIGN_OR_RETURN(m->config_, ParseModelConfig(config_text, config_path));
  ASSIGN_OR_RETURN(m->file_, SafetensorsFile::Open(weights_path));
  const SafetensorsFile& file = *m->file_;

  const std::vector<Expected> expected = ExpectedTensors(m->config_, &m->weights_);
  std::set<std::string_view> names;
  for (const Expected& e : expected) {
    names.insert(e.name);
    const std::string where = absl::StrCat(weights_path, ": tensor '", e.name, "'");
    const TensorView* t = file.Find(e.name);
    const std::string want =
        e.gemm != nullptr && m->config_.torch_dtype == TorchDtype::kBfloat16 ? "BF16" : "F32";
    if (t == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " is missing (expected ", want, " ", ShapeString(e.shape), " for attention_kind ",
          std::string(AttentionKindName(m->config_.attention_kind)), ")"));
    }
    if (t->dtype != want) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unsupported dtype '", t->dtype, "' (expected ", want,
                       DtypeMismatch(e, t->dtype, m->config_, config_path), ")"));
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
    } else {
      e.gemm->f32 = t->f32();
    }
  }
  for (const TensorView& t : file.tensors()) {
    if (names.count(t.name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          weights_path, ": unexpected tensor '", t.name, "' for attention_kind ",
          std::string(AttentionKindName(m->config_.attention_kind)), " with conv_kernel_size ",
          m->config_.conv_kernel_size));
    }
    m->weight_bytes_ += t.size_bytes;
  }

  Sha256 h;
  h.Update(config_text.data(), config_text.size());
  h.Update(file.file_data(), file.file_size());
  const std::array<uint8_t, 32> digest = h.Final();
  m->fingerprint_ = HexLower(digest.data(), 16);
  return m;
}

}  // namespace flatstate
