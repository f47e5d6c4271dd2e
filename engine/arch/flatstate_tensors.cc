#include "engine/arch/flatstate_tensors.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/arch/flatstate_tensors_json.h"  // generated: kFlatstateTensorsJson
#include "engine/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace flatstate {
namespace {

using Role = FlatstateTensor::Role;
using json = nlohmann::json;

// The config dimensions a shape may name.
enum class Dim {
  kVocab,
  kHidden,
  kHeads,
  kHeadDim,
  kIntermediate,
  kConvKernel,
  kFavorFeatures,
  kRfaFeatures
};

constexpr std::pair<const char*, Dim> kDims[] = {
    {"vocab_size", Dim::kVocab},
    {"hidden_size", Dim::kHidden},
    {"num_attention_heads", Dim::kHeads},
    {"head_dim", Dim::kHeadDim},
    {"intermediate_size", Dim::kIntermediate},
    {"conv_kernel_size", Dim::kConvKernel},
    {"favor_num_features", Dim::kFavorFeatures},
    {"rfa_num_features", Dim::kRfaFeatures},
};

constexpr std::pair<const char*, Role> kRoles[] = {
    {"embed", Role::kEmbed},
    {"attn_norm", Role::kAttnNorm},
    {"conv", Role::kConv},
    {"wqkv", Role::kWqkv},
    {"wo", Role::kWo},
    {"decay_logit", Role::kDecayLogit},
    {"feature_proj", Role::kFeatureProj},
    {"feature_log_scale", Role::kFeatureLogScale},
    {"gate_weight", Role::kGateWeight},
    {"gate_bias", Role::kGateBias},
    {"mlp_norm", Role::kMlpNorm},
    {"w1", Role::kW1},
    {"w2", Role::kW2},
    {"norm", Role::kNorm},
    {"lm_head", Role::kLmHead},
};

bool IsGemmRole(Role r) {
  return r == Role::kWqkv || r == Role::kWo || r == Role::kW1 || r == Role::kW2;
}

// One dimension of a shape: factor * (the config dimension `dim`, or 1 without one).
struct Extent {
  int64_t factor = 1;
  bool has_dim = false;
  Dim dim = Dim::kHidden;
};

// One entry of the JSON, parsed.
struct Entry {
  std::string name;
  Role role = Role::kEmbed;
  std::vector<Extent> shape;
  bool gemm = false;
  bool conv = false;                 // only where ModelConfig::layer_has_conv
  std::vector<AttentionKind> kinds;  // non-empty: only in non-softmax layers of these kinds
};

struct Spec {
  std::vector<Entry> before_layers, per_layer, after_layers;
};

absl::StatusOr<Extent> ParseExtent(const json& v, const std::string& at) {
  Extent e;
  if (v.is_number_unsigned() && v.get<uint64_t>() >= 1) {
    e.factor = static_cast<int64_t>(v.get<uint64_t>());
    return e;
  }
  if (!v.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ": a dimension is an integer >= 1 or a string, not ", v.dump()));
  }
  std::string s = v.get<std::string>();
  if (const size_t star = s.find('*'); star != std::string::npos) {
    if (!absl::SimpleAtoi(s.substr(0, star), &e.factor) || e.factor < 1) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": bad factor in '", s, "'"));
    }
    s = s.substr(star + 1);
  }
  for (const auto& [name, dim] : kDims) {
    if (s == name) {
      e.has_dim = true;
      e.dim = dim;
      return e;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(at, ": unknown dimension '", s, "'"));
}

absl::StatusOr<Entry> ParseEntry(const json& j, const std::string& at, bool per_layer) {
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(at, ": not an object"));
  Entry e;
  bool has_role = false;
  for (const auto& [key, v] : j.items()) {
    const std::string where = absl::StrCat(at, " key '", key, "'");
    if (key == "name" && v.is_string()) {
      e.name = v.get<std::string>();
    } else if (key == "role" && v.is_string()) {
      for (const auto& [name, role] : kRoles) {
        if (v.get<std::string>() == name) {
          e.role = role;
          has_role = true;
        }
      }
      if (!has_role) return absl::InvalidArgumentError(absl::StrCat(where, ": unknown role"));
    } else if (key == "shape" && v.is_array() && !v.empty()) {
      for (const json& d : v) {
        ASSIGN_OR_RETURN(Extent x, ParseExtent(d, where));
        e.shape.push_back(x);
      }
    } else if (per_layer && key == "gemm" && v.is_boolean()) {
      e.gemm = v.get<bool>();
    } else if (per_layer && key == "conv" && v.is_boolean()) {
      e.conv = v.get<bool>();
    } else if (per_layer && key == "kinds" && v.is_array() && !v.empty()) {
      for (const json& k : v) {
        absl::StatusOr<AttentionKind> kind =
            AttentionKindFromName(k.is_string() ? k.get<std::string>() : k.dump());
        if (!kind.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", k.dump()));
        e.kinds.push_back(*kind);
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key or bad value"));
    }
  }
  if (e.name.empty() || !has_role || e.shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(at, ": needs name, role and shape"));
  }
  if ((e.name.find("{i}") != std::string::npos) != per_layer) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ": '", e.name, "': per_layer names hold '{i}', the others do not"));
  }
  if (e.gemm != IsGemmRole(e.role) || (e.gemm && e.shape.size() != 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ": '", e.name, "': gemm is true exactly for roles wqkv, wo, w1, w2, shape [n, k]"));
  }
  return e;
}

absl::StatusOr<Spec> ParseSpec(absl::string_view text) {
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::InvalidArgumentError("the table is not a JSON object");
  Spec spec;
  bool has[3] = {false, false, false};
  for (const auto& [key, v] : j.items()) {
    std::vector<Entry>* out = key == "before_layers"  ? &spec.before_layers
                              : key == "per_layer"    ? &spec.per_layer
                              : key == "after_layers" ? &spec.after_layers
                                                      : nullptr;
    if (out == nullptr) {
      if (key == "_doc") continue;
      return absl::InvalidArgumentError(absl::StrCat("unknown key '", key, "'"));
    }
    if (!v.is_array()) return absl::InvalidArgumentError(absl::StrCat(key, ": not an array"));
    has[out == &spec.before_layers ? 0 : out == &spec.per_layer ? 1 : 2] = true;
    for (size_t n = 0; n < v.size(); ++n) {
      ASSIGN_OR_RETURN(Entry e,
                       ParseEntry(v[n], absl::StrCat(key, "[", n, "]"), out == &spec.per_layer));
      out->push_back(std::move(e));
    }
  }
  if (!has[0] || !has[1] || !has[2]) {
    return absl::InvalidArgumentError("needs before_layers, per_layer and after_layers");
  }
  return spec;
}

int64_t DimValue(const ModelConfig& c, Dim d) {
  switch (d) {
    case Dim::kVocab:
      return c.vocab_size;
    case Dim::kHidden:
      return c.hidden_size;
    case Dim::kHeads:
      return c.num_attention_heads;
    case Dim::kHeadDim:
      return c.head_dim;
    case Dim::kIntermediate:
      return c.intermediate_size;
    case Dim::kConvKernel:
      return c.conv_kernel_size;
    case Dim::kFavorFeatures:
      return c.favor_num_features;
    case Dim::kRfaFeatures:
      return c.rfa_num_features;
  }
  return 0;
}

// Whether per_layer entry `e` is one of layer i's tensors.
bool InLayer(const Entry& e, const ModelConfig& c, int i) {
  if (e.conv && !c.layer_has_conv(i)) return false;
  if (e.kinds.empty()) return true;
  if (c.layer_attention(i).softmax) return false;
  for (AttentionKind k : e.kinds) {
    if (k == c.attention_kind) return true;
  }
  return false;
}

void Append(const Entry& e, const ModelConfig& c, int layer, std::vector<FlatstateTensor>* out) {
  FlatstateTensor t;
  t.name = layer < 0 ? e.name : absl::StrReplaceAll(e.name, {{"{i}", absl::StrCat(layer)}});
  for (const Extent& x : e.shape)
    t.shape.push_back(x.factor * (x.has_dim ? DimValue(c, x.dim) : 1));
  t.role = e.role;
  t.layer = layer;
  t.gemm = e.gemm;
  out->push_back(std::move(t));
}

std::vector<FlatstateTensor> Interpret(const Spec& s, const ModelConfig& c) {
  std::vector<FlatstateTensor> t;
  for (const Entry& e : s.before_layers) Append(e, c, -1, &t);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    for (const Entry& e : s.per_layer) {
      if (InLayer(e, c, i)) Append(e, c, i, &t);
    }
  }
  for (const Entry& e : s.after_layers) Append(e, c, -1, &t);
  return t;
}

}  // namespace

std::vector<FlatstateTensor> FlatstateTensorTable(const ModelConfig& config) {
  static const Spec* const spec = [] {
    absl::StatusOr<Spec> s = ParseSpec(kFlatstateTensorsJson);
    if (!s.ok()) {
      std::fprintf(stderr, "engine/arch/flatstate_tensors.json (embedded) is malformed: %s\n",
                   std::string(s.status().message()).c_str());
      std::abort();
    }
    return new Spec(*std::move(s));
  }();
  return Interpret(*spec, config);
}

absl::StatusOr<std::vector<FlatstateTensor>> FlatstateTensorTableFromJson(
    absl::string_view json, const ModelConfig& config) {
  ASSIGN_OR_RETURN(Spec spec, ParseSpec(json));
  return Interpret(spec, config);
}

}  // namespace flatstate
