#include "engine/model/config.h"

#include <climits>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace flatstate {
namespace {

using json = nlohmann::json;

absl::Status Bad(absl::string_view path, absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": config key '", key, "' ", why));
}

// Reads an integer key; `required` keys must be present.
absl::Status ReadInt(const json& j, absl::string_view path, const char* key, bool required,
                     int64_t lo, int64_t hi, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    return required ? Bad(path, key, "is missing") : absl::OkStatus();
  }
  if (!it->is_number_integer()) return Bad(path, key, "must be an integer");
  int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return Bad(path, key, absl::StrCat("= ", v, " is out of range [", lo, ", ", hi, "]"));
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status ReadFloat(const json& j, absl::string_view path, const char* key, float* out) {
  auto it = j.find(key);
  if (it == j.end()) return absl::OkStatus();
  if (!it->is_number()) return Bad(path, key, "must be a number");
  double v = it->get<double>();
  if (!std::isfinite(v) || v <= 0 || v > std::numeric_limits<float>::max()) {
    return Bad(path, key, "must be a finite number > 0 that fits a float");
  }
  *out = static_cast<float>(v);
  return absl::OkStatus();
}

}  // namespace

absl::string_view TorchDtypeName(TorchDtype dtype) {
  switch (dtype) {
    case TorchDtype::kBfloat16:
      return "bfloat16";
    case TorchDtype::kInt8:
      return "int8";
    case TorchDtype::kInt4:
      return "int4";
    case TorchDtype::kFloat32:
      break;
  }
  return "float32";
}

absl::string_view AttentionKindName(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kSoftmax:
      return "softmax";
    case AttentionKind::kLinearElu:
      return "linear_elu";
    case AttentionKind::kCosformer:
      return "cosformer";
    case AttentionKind::kCosine:
      return "cosine";
    case AttentionKind::kFavor:
      return "favor";
    case AttentionKind::kGated:
      return "gated";
    case AttentionKind::kWindow:
      return "window";
    case AttentionKind::kHybrid:
      return "hybrid";
  }
  return "unknown";
}

absl::StatusOr<AttentionKind> AttentionKindFromName(absl::string_view name) {
  for (AttentionKind k : {AttentionKind::kSoftmax, AttentionKind::kLinearElu,
                          AttentionKind::kCosformer, AttentionKind::kCosine, AttentionKind::kFavor,
                          AttentionKind::kGated, AttentionKind::kWindow, AttentionKind::kHybrid}) {
    if (AttentionKindName(k) == name) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown attention_kind '", name,
                   "' (expected softmax, linear_elu, cosformer, cosine, favor, gated, window or "
                   "hybrid)"));
}

bool ModelConfig::has_conv() const {
  return conv_kernel_size > 0 && attention_kind != AttentionKind::kSoftmax &&
         attention_kind != AttentionKind::kWindow;
}

bool ModelConfig::has_kv() const {
  for (int l = 0; l < num_hidden_layers; ++l) {
    if (layer_attention(l).softmax) return true;
  }
  return false;
}

std::string ModelKindName(const ModelConfig& c) {
  if (c.architecture == "flatstate") return std::string(AttentionKindName(c.attention_kind));
  if (!c.has_kv()) return "recurrent";
  return c.has_state() ? "hybrid" : "softmax";
}

int ModelConfig::kv_layers() const {
  int n = 0;
  for (int l = 0; l < num_hidden_layers; ++l) n += layer_attention(l).softmax ? 1 : 0;
  return n;
}

int ModelConfig::kv_layer_index(int layer) const {
  int n = 0;
  for (int l = 0; l < layer; ++l) n += layer_attention(l).softmax ? 1 : 0;
  return n;
}

LayerAttention ModelConfig::layer_attention(int layer) const {
  if (layer >= 0 && static_cast<size_t>(layer) < softmax_layer.size() && softmax_layer[layer]) {
    return {.softmax = true};
  }
  if (delta.value_heads > 0) return {.delta = true};
  if (ssm.heads > 0) return {.ssm = true};
  if (rwkv.heads > 0) return {.rwkv7 = true};
  if (gla.heads > 0) return {.gla = true};
  switch (attention_kind) {
    case AttentionKind::kSoftmax:
      return {.softmax = true};
    case AttentionKind::kWindow:
      return {.linear = false, .window = true};
    case AttentionKind::kHybrid:
      if (hybrid_layout == HybridLayout::kSum) return {.linear = true, .window = true};
      return {.linear = layer % 2 == 1, .window = layer % 2 == 0};
    default:
      return {.linear = true, .window = false};
  }
}

int ModelConfig::feature_dim() const {
  switch (attention_kind) {
    case AttentionKind::kSoftmax:
    case AttentionKind::kWindow:
      return 0;
    case AttentionKind::kCosformer:
      return 2 * head_dim;
    case AttentionKind::kFavor:
      return favor_num_features;
    case AttentionKind::kGated:
      return 2 * rfa_num_features;
    default:
      return head_dim;
  }
}

size_t ModelConfig::state_floats() const {
  const size_t h = num_attention_heads, f = feature_dim(), d = head_dim, D = hidden_size;
  const size_t conv = has_conv() && conv_kernel_size > 1 ? size_t(conv_kernel_size - 1) * D : 0;
  size_t total = 0;
  for (int l = 0; l < num_hidden_layers; ++l) {
    const LayerAttention a = layer_attention(l);
    if (a.softmax) continue;
    if (a.delta || a.ssm || a.rwkv7 || a.gla) {
      total += a.delta ? delta.state_floats()
               : a.ssm ? ssm.state_floats()
               : a.rwkv7 ? rwkv.state_floats()
                         : gla.state_floats();
      continue;
    }
    total +=
        (a.linear ? h * (f * d + f + 1) : 0) + conv + (a.window ? 2 * size_t(window_size) * D : 0);
  }
  return total;
}

size_t ModelConfig::state_bytes() const { return sizeof(float) * state_floats(); }

size_t ModelConfig::kv_bytes_per_token() const {
  return 2 * size_t(kv_layers()) * kv_dim() * sizeof(float);
}

std::vector<double> ModelConfig::RopeInvFreq() const {
  const int rd = rotary(), half = rd / 2;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = std::pow(double{rope_theta}, -2.0 * i / rd);
  const RopeScaling& r = rope_scaling;
  if (r.type == RopeScalingType::kLinear) {
    for (double& f : inv) f /= r.factor;
  } else if (r.type == RopeScalingType::kLlama3) {
    const double pi = 3.14159265358979323846;
    const double low_wavelen = r.original_max_position_embeddings / r.low_freq_factor;
    const double high_wavelen = r.original_max_position_embeddings / r.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * pi / f;
      if (wavelen > low_wavelen) {
        f /= r.factor;
      } else if (wavelen >= high_wavelen) {  // medium: between the two
        const double smooth = (r.original_max_position_embeddings / wavelen - r.low_freq_factor) /
                              (r.high_freq_factor - r.low_freq_factor);
        f = (1 - smooth) * f / r.factor + smooth * f;
      }
    }
  }
  return inv;
}

namespace {

// "chat_template": {"system", "user", "assistant", "separator": string, "stop": string or list of
// non-empty strings}; every key optional (absent: the ChatTemplate default).
absl::Status ReadChatTemplate(const json& j, absl::string_view path, ChatTemplate* out) {
  if (!j.is_object()) return Bad(path, "chat_template", "must be an object");
  for (auto [key, field] : {std::pair<const char*, std::string*>{"system", &out->system},
                            {"user", &out->user},
                            {"assistant", &out->assistant},
                            {"separator", &out->separator}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_string()) return Bad(path, absl::StrCat("chat_template.", key), "must be a string");
    *field = it->get<std::string>();
  }
  if (auto it = j.find("stop"); it != j.end()) {
    out->stop.clear();
    const json list = it->is_string() ? json::array({*it}) : *it;
    if (!list.is_array()) return Bad(path, "chat_template.stop", "must be a string or a list");
    for (const json& s : list) {
      if (!s.is_string() || s.get<std::string>().empty()) {
        return Bad(path, "chat_template.stop", "must hold non-empty strings");
      }
      out->stop.push_back(s.get<std::string>());
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text, absl::string_view path) {
  json j = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": top level must be a JSON object"));
  }
  ModelConfig c;
  auto kind_it = j.find("attention_kind");
  if (kind_it == j.end()) return Bad(path, "attention_kind", "is missing");
  if (!kind_it->is_string()) return Bad(path, "attention_kind", "must be a string");
  auto kind = AttentionKindFromName(kind_it->get<std::string>());
  if (!kind.ok()) return Bad(path, "attention_kind", kind.status().message());
  c.attention_kind = *kind;
  if (auto dt = j.find("torch_dtype"); dt != j.end()) {
    bool known = false;
    for (TorchDtype d :
         {TorchDtype::kFloat32, TorchDtype::kBfloat16, TorchDtype::kInt8, TorchDtype::kInt4}) {
      if (dt->is_string() && dt->get<std::string>() == TorchDtypeName(d)) {
        c.torch_dtype = d;
        known = true;
      }
    }
    if (!known) {
      return Bad(path, "torch_dtype",
                 absl::StrCat("must be \"float32\", \"bfloat16\", \"int8\" or \"int4\" (the "
                              "layers' GEMM weights in model.safetensors), got ",
                              dt->dump()));
    }
  }

  int64_t v = 0;
  constexpr int64_t kBig = 1 << 16;
  auto read = [&](const char* key, bool required, int64_t lo, int64_t hi, auto* field) {
    v = static_cast<int64_t>(*field);
    absl::Status s = ReadInt(j, path, key, required, lo, hi, &v);
    if (s.ok()) *field = static_cast<std::remove_pointer_t<decltype(field)>>(v);
    return s;
  };
  for (absl::Status s :
       {read("vocab_size", true, 256, 256, &c.vocab_size),
        read("hidden_size", true, 2, kBig, &c.hidden_size),
        read("num_hidden_layers", true, 1, 1024, &c.num_hidden_layers),
        read("num_attention_heads", true, 1, 1024, &c.num_attention_heads),
        read("intermediate_size", true, 1, 1 << 20, &c.intermediate_size),
        read("conv_kernel_size", false, 0, 64, &c.conv_kernel_size),
        read("max_position_embeddings", false, 1, int64_t{1} << 40, &c.max_position_embeddings),
        read("cosformer_horizon", false, 1, INT32_MAX, &c.cosformer_horizon),
        read("favor_num_features", false, 1, kBig, &c.favor_num_features),
        read("chunk_size", false, 1, 1 << 16, &c.chunk_size),
        read("window_size", false, 1, kBig, &c.window_size),
        read("rfa_num_features", false, 1, kBig, &c.rfa_num_features)}) {
    if (!s.ok()) return s;
  }
  for (absl::Status s : {ReadFloat(j, path, "rms_norm_eps", &c.rms_norm_eps),
                         ReadFloat(j, path, "linear_eps", &c.linear_eps),
                         ReadFloat(j, path, "rope_theta", &c.rope_theta)}) {
    if (!s.ok()) return s;
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    return Bad(path, "hidden_size",
               absl::StrCat("= ", c.hidden_size,
                            " is not divisible by num_attention_heads = ", c.num_attention_heads));
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (c.head_dim % 2 != 0) return Bad(path, "hidden_size", "gives an odd head_dim");
  if (auto hd = j.find("head_dim");
      hd != j.end() && (!hd->is_number_integer() || hd->get<int64_t>() != c.head_dim)) {
    return Bad(path, "head_dim",
               absl::StrCat("must equal hidden_size / num_attention_heads = ", c.head_dim));
  }
  if (c.attention_kind == AttentionKind::kSoftmax && c.conv_kernel_size != 0) {
    return Bad(path, "conv_kernel_size", "must be 0 for softmax (it uses RoPE)");
  }
  if (c.attention_kind == AttentionKind::kWindow && c.conv_kernel_size != 0) {
    return Bad(path, "conv_kernel_size", "must be 0 for window (it uses RoPE)");
  }
  for (auto [key, kind] :
       {std::pair<const char*, AttentionKind>{"window_size", AttentionKind::kWindow},
        {"rfa_num_features", AttentionKind::kGated}}) {
    const bool needed = c.attention_kind == kind || (kind == AttentionKind::kWindow &&
                                                     c.attention_kind == AttentionKind::kHybrid);
    if (needed && !j.contains(key)) {
      return Bad(path, key,
                 absl::StrCat("is missing (attention_kind ", AttentionKindName(c.attention_kind),
                              " needs it)"));
    }
  }
  if (auto hl = j.find("hybrid_layout"); hl != j.end()) {
    if (!hl->is_string() || (*hl != "alternate" && *hl != "sum")) {
      return Bad(path, "hybrid_layout", "must be \"alternate\" or \"sum\"");
    }
    c.hybrid_layout = *hl == "sum" ? HybridLayout::kSum : HybridLayout::kAlternate;
  }
  if (auto lt = j.find("layer_types"); lt != j.end()) {
    const AttentionKind k = c.attention_kind;
    if (k == AttentionKind::kSoftmax || k == AttentionKind::kWindow ||
        k == AttentionKind::kHybrid || k == AttentionKind::kGated) {
      return Bad(path, "layer_types",
                 absl::StrCat("is for the kinds linear_elu, cosformer, cosine and favor, not ",
                              AttentionKindName(k)));
    }
    if (!lt->is_array() || lt->size() != static_cast<size_t>(c.num_hidden_layers)) {
      return Bad(path, "layer_types",
                 absl::StrCat("must be a list of num_hidden_layers = ", c.num_hidden_layers,
                              " entries, each \"softmax\" or \"recurrent\""));
    }
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& t = (*lt)[i];
      if (t != "softmax" && t != "recurrent") {
        return Bad(path, absl::StrCat("layer_types[", i, "]"),
                   absl::StrCat("= ", t.dump(), " (expected \"softmax\" or \"recurrent\")"));
      }
      c.softmax_layer.push_back(t == "softmax");
    }
  }
  if (auto ct = j.find("chat_template"); ct != j.end()) {
    if (absl::Status st = ReadChatTemplate(*ct, path, &c.chat_template); !st.ok()) return st;
  }
  return c;
}

}  // namespace flatstate
