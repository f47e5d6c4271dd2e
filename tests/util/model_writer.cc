#include "tests/util/model_writer.h"

#include <stdlib.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/arch/flatstate_tensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace flatstate::testing {
namespace {

using json = nlohmann::ordered_json;

// splitmix64-based generator with Box-Muller normals: identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return ((Next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0, 1)
  double Normal() {
    return std::sqrt(-2.0 * std::log(Uniform())) * std::cos(6.283185307179586 * Uniform());
  }

 private:
  uint64_t s_;
};

NamedTensor Filled(std::string name, std::vector<int64_t> shape, float value) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return {std::move(name), std::move(shape), std::vector<float>(n, value)};
}

NamedTensor Normal(std::string name, std::vector<int64_t> shape, float mean, float stddev,
                   Rng& rng) {
  NamedTensor t = Filled(std::move(name), std::move(shape), 0.f);
  for (float& v : t.data) v = mean + stddev * static_cast<float>(rng.Normal());
  return t;
}

// A float written with its shortest round-tripping decimal form (1e-5f -> 1e-05).
double ShortestDouble(float f) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

}  // namespace

uint16_t Bf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  const uint32_t lower = u & 0xFFFF, upper = u >> 16;
  // Round half to even on the 16 bits dropped.
  const bool up = lower > 0x8000 || (lower == 0x8000 && (upper & 1) != 0);
  return static_cast<uint16_t>(upper + (up ? 1 : 0));
}

float FromBf16Bits(uint16_t b) {
  const uint32_t u = uint32_t{b} << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

std::string RawSafetensors(std::string_view header_json, std::string_view data) {
  std::string out(8, '\0');
  const uint64_t n = header_json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.append(header_json);
  out.append(data);
  return out;
}

float QuantizeBlockRef(const float* x, int64_t len, float qmax, int8_t* q) {
  float amax = 0.f;
  for (int64_t t = 0; t < len; ++t) amax = std::max(amax, std::fabs(x[t]));
  for (int64_t t = 0; t < 32; ++t) q[t] = 0;
  if (amax == 0.f) return 0.f;
  const float scale = amax / qmax;
  for (int64_t t = 0; t < len; ++t) {
    const float r = std::nearbyint(x[t] / scale);  // round to nearest, ties to even
    q[t] = static_cast<int8_t>(std::min(qmax, std::max(-qmax, r)));
  }
  return scale;
}

std::vector<NamedTensor> ExpandQuantized(const std::vector<NamedTensor>& tensors) {
  std::vector<NamedTensor> out;
  for (const NamedTensor& t : tensors) {
    if (t.quantized == TorchDtype::kFloat32 || t.quantized == TorchDtype::kBfloat16) {
      out.push_back(t);
      continue;
    }
    const bool int4 = t.quantized == TorchDtype::kInt4;
    const int64_t n = t.shape.at(0), k = t.shape.at(1), nb = (k + 31) / 32;
    const int64_t row = int4 ? (k + 1) / 2 : k;
    NamedTensor q{t.name,
                  {n, row},
                  {},
                  false,
                  TorchDtype::kFloat32,
                  int4 ? "U8" : "I8",
                  std::string(static_cast<size_t>(n * row), int4 ? static_cast<char>(0x88) : '\0')};
    NamedTensor s = Filled(t.name + "_scale", {n, nb}, 0.f);
    int8_t block[32];
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t len = std::min<int64_t>(32, k - b * 32);
        s.data[j * nb + b] =
            QuantizeBlockRef(t.data.data() + j * k + b * 32, len, int4 ? 7.f : 127.f, block);
        for (int64_t i = 0; i < len; ++i) {
          const int64_t kk = b * 32 + i;
          if (!int4) {
            q.raw[j * k + kk] = static_cast<char>(block[i]);
            continue;
          }
          auto& byte = reinterpret_cast<uint8_t&>(q.raw[j * row + kk / 2]);
          const int nibble = block[i] + 8;
          byte = static_cast<uint8_t>(kk % 2 == 0 ? (byte & 0xF0) | nibble
                                                  : (byte & 0x0F) | (nibble << 4));
        }
      }
    }
    out.push_back(std::move(q));
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<float> DequantizedValues(const NamedTensor& t) {
  const std::vector<NamedTensor> stored = ExpandQuantized({t});
  if (stored.size() != 2) return t.data;
  const bool int4 = t.quantized == TorchDtype::kInt4;
  const int64_t n = t.shape[0], k = t.shape[1], nb = (k + 31) / 32, row = int4 ? (k + 1) / 2 : k;
  std::vector<float> out(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t kk = 0; kk < k; ++kk) {
      const uint8_t byte =
          static_cast<uint8_t>(stored[0].raw[int4 ? j * row + kk / 2 : j * k + kk]);
      const int q = int4 ? (kk % 2 == 0 ? byte & 15 : byte >> 4) - 8 : static_cast<int8_t>(byte);
      out[j * k + kk] = static_cast<float>(q) * stored[1].data[j * nb + kk / 32];
    }
  }
  return out;
}

std::string SerializeSafetensors(const std::vector<NamedTensor>& expanded_from) {
  const std::vector<NamedTensor> tensors = ExpandQuantized(expanded_from);
  json header = json::object();
  std::string data;
  for (const NamedTensor& t : tensors) {
    if (!t.raw_dtype.empty()) continue;  // after the others (below)
    const size_t begin = data.size();
    if (t.bf16) {
      for (float v : t.data) {
        const uint16_t b = Bf16Bits(v);
        data.append(reinterpret_cast<const char*>(&b), sizeof(b));
      }
    } else {
      data.append(reinterpret_cast<const char*>(t.data.data()), t.data.size() * sizeof(float));
    }
    header[t.name] = {{"dtype", t.bf16 ? "BF16" : "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {begin, data.size()}}};
  }
  for (const NamedTensor& t : tensors) {
    if (t.raw_dtype.empty()) continue;
    const size_t begin = data.size();
    data.append(t.raw);
    header[t.name] = {
        {"dtype", t.raw_dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return RawSafetensors(text, data);
}

std::string WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors) {
  WriteFile(path, SerializeSafetensors(tensors));
  return path;
}

ModelConfig SmallConfig(AttentionKind kind) {
  ModelConfig c;
  c.attention_kind = kind;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.head_dim = 16;
  c.intermediate_size = 128;
  c.conv_kernel_size = kind == AttentionKind::kSoftmax || kind == AttentionKind::kWindow ? 0 : 4;
  c.favor_num_features = 24;
  c.cosformer_horizon = 512;
  c.chunk_size = 16;
  c.window_size = 8;  // shorter than a chunk: prefill chunks run past the window
  c.rfa_num_features = 12;
  return c;
}

ModelConfig Gpt2SmallConfig(AttentionKind kind) {
  ModelConfig c;
  c.attention_kind = kind;
  c.hidden_size = 768;
  c.num_hidden_layers = 12;
  c.num_attention_heads = 12;
  c.head_dim = 64;
  c.intermediate_size = 3072;
  c.conv_kernel_size = kind == AttentionKind::kSoftmax || kind == AttentionKind::kWindow ? 0 : 4;
  c.chunk_size = 64;
  c.window_size = 64;
  c.rfa_num_features = 32;
  return c;
}

std::vector<NamedTensor> RandomModelTensors(const ModelConfig& cfg, uint64_t seed, float scale) {
  Rng rng(seed);
  using R = FlatstateTensor::Role;
  std::vector<NamedTensor> t;
  // The loader's own table (engine/arch/flatstate_tensors.h), values drawn in its order.
  for (const FlatstateTensor& e : FlatstateTensorTable(cfg)) {
    switch (e.role) {
      case R::kAttnNorm:
      case R::kMlpNorm:
      case R::kNorm:
        t.push_back(Filled(e.name, e.shape, 1.f));
        break;
      case R::kConv: {
        NamedTensor conv = Normal(e.name, e.shape, 0.f, scale * 0.1f, rng);
        const int64_t D = e.shape[0], K = e.shape[1];
        for (int64_t d = 0; d < D; ++d) conv.data[d * K + K - 1] += 1.f;
        t.push_back(std::move(conv));
        break;
      }
      case R::kDecayLogit:
        t.push_back(Normal(e.name, e.shape, 0.5f, scale * 0.1f, rng));
        break;
      case R::kFeatureProj:
        t.push_back(Normal(e.name, e.shape, 0.f, 1.f, rng));
        break;
      case R::kFeatureLogScale:
        t.push_back(Normal(e.name, e.shape, 0.f, 0.1f, rng));
        break;
      case R::kGateBias:
        t.push_back(Normal(e.name, e.shape, 1.f, 0.5f, rng));
        break;
      default:  // embeddings, GEMM weights, gate weight, head
        t.push_back(Normal(e.name, e.shape, 0.f, scale, rng));
        break;
    }
    // The layers' GEMM weights take torch_dtype's stored type.
    if (!e.gemm || cfg.torch_dtype == TorchDtype::kFloat32) continue;
    NamedTensor& x = t.back();
    if (cfg.torch_dtype != TorchDtype::kBfloat16) {
      x.quantized = cfg.torch_dtype;
      continue;
    }
    x.bf16 = true;
    for (float& v : x.data) v = FromBf16Bits(Bf16Bits(v));
  }
  return t;
}

std::string ConfigJson(const ModelConfig& c) {
  json j = {
      {"attention_kind", std::string(AttentionKindName(c.attention_kind))},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"intermediate_size", c.intermediate_size},
      {"rms_norm_eps", ShortestDouble(c.rms_norm_eps)},
      {"linear_eps", ShortestDouble(c.linear_eps)},
      {"conv_kernel_size", c.conv_kernel_size},
      {"rope_theta", ShortestDouble(c.rope_theta)},
      {"max_position_embeddings", c.max_position_embeddings},
      {"cosformer_horizon", c.cosformer_horizon},
      {"favor_num_features", c.favor_num_features},
      {"chunk_size", c.chunk_size},
      {"model_type", "flatstate"},
      {"architectures", {"FlatstateForCausalLM"}},
      {"head_dim", c.hidden_size / c.num_attention_heads},
      {"torch_dtype", std::string(TorchDtypeName(c.torch_dtype))},
  };
  if (c.attention_kind == AttentionKind::kWindow || c.attention_kind == AttentionKind::kHybrid) {
    j["window_size"] = c.window_size;
  }
  if (c.attention_kind == AttentionKind::kHybrid) {
    j["hybrid_layout"] = c.hybrid_layout == HybridLayout::kSum ? "sum" : "alternate";
  }
  if (c.attention_kind == AttentionKind::kGated) j["rfa_num_features"] = c.rfa_num_features;
  if (!c.softmax_layer.empty()) {
    json types = json::array();
    for (bool s : c.softmax_layer) types.push_back(s ? "softmax" : "recurrent");
    j["layer_types"] = types;
  }
  return j.dump(2) + "\n";
}

absl::StatusOr<std::string> WriteRandomModel(const std::string& dir, const ModelConfig& cfg,
                                             uint64_t seed) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    ADD_FAILURE() << "cannot create " << dir << ": " << ec.message();
    return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  if (!WriteFile(dir + "/config.json", ConfigJson(cfg)) ||
      !WriteFile(dir + "/model.safetensors",
                 SerializeSafetensors(RandomModelTensors(cfg, seed)))) {
    return absl::InternalError(absl::StrCat("cannot write the model files in ", dir));
  }
  return dir;
}

std::string TempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string pattern =
      absl::StrCat(base != nullptr && *base != '\0' ? base : "/tmp", "/flatstate_XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp(" << pattern << ") failed";
  }
  return pattern;
}

bool WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    ADD_FAILURE() << "cannot write " << path;
    return false;
  }
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    ADD_FAILURE() << "cannot read " << path;
    return "";
  }
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace flatstate::testing
