// A loaded model: config, memory-mapped weights (fp32; the layers' GEMM weights fp32, bf16, or
// int8 / int4 quants with fp32 scales, as config.json's torch_dtype says), fingerprint.
//
// Owns the mapping of model.safetensors; every pointer in ModelWeights points into it and stays
// valid for the Model's lifetime. Immutable after Load, so thread-safe for concurrent readers.
// Load fails (never crashes) with an error naming the file and, where one is involved, the tensor:
// NotFound for a missing file, InvalidArgument/DataLoss for malformed content (see
// engine/model/safetensors.h for the file checks), InvalidArgument for a tensor whose dtype is
// not the one its name takes (BF16 only for the four GEMM weights, and only with torch_dtype
// "bfloat16", which then needs all of them BF16; likewise the int8 / int4 layouts with their
// scale tensors), and for a stored int8 / int4 weight with a quant out of range or a scale that
// is not a finite number >= 0.
#ifndef FLATSTATE_ENGINE_MODEL_MODEL_H_
#define FLATSTATE_ENGINE_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"

namespace flatstate {

class SafetensorsFile;

// Tensor names (and shapes) in model.safetensors, D = hidden, H = heads, hd = head_dim,
// F = intermediate, K = conv_kernel_size, NF = favor_num_features, R = rfa_num_features
// (docs/kinds.md for gated, window and hybrid):
//   embed.weight                      [256, D]
//   layers.{i}.attn_norm.weight       [D]
//   layers.{i}.attn.conv              [D, K]        (ModelConfig::has_conv)
//   layers.{i}.attn.wqkv.weight       [3D, D]       rows: q (D), k (D), v (D); head h = rows h*hd..
//   layers.{i}.attn.wo.weight         [D, D]
//   layers.{i}.attn.decay_logit       [H]           (cosine)
//   layers.{i}.attn.feature_proj      [NF, hd]      (favor; gated: [R, hd])
//   layers.{i}.attn.feature_log_scale [H]           (gated)
//   layers.{i}.attn.gate.weight       [H, D]        (gated)
//   layers.{i}.attn.gate.bias         [H]           (gated)
//   layers.{i}.mlp_norm.weight        [D]
//   layers.{i}.mlp.w1.weight          [F, D]
//   layers.{i}.mlp.w2.weight          [D, F]
//   norm.weight                       [D]
//   lm_head.weight                    [256, D]
// wqkv, wo, w1 and w2 are F32, or BF16 when ModelConfig::torch_dtype is kBfloat16, or for kInt8
// I8 [n, k] quants (kInt4: U8 [n, ceil(k / 2)], two per byte) each with an F32 scale tensor
// "<name>_scale" [n, ceil(k / 32)]; every other tensor is F32.

// The suffix of a quantised GEMM weight's scale tensor ("layers.0.attn.wo.weight_scale") and the
// number of consecutive inputs one scale covers.
inline constexpr char kScaleSuffix[] = "_scale";
inline constexpr int64_t kQuantBlock = 32;

// One of the layers' GEMM weights [n, k] as the file stores it: f32, bf16 or q (with scale) is set,
// as torch_dtype says.
struct GemmTensor {
  int64_t n = 0, k = 0;
  const float* f32 = nullptr;      // torch_dtype float32
  const uint16_t* bf16 = nullptr;  // torch_dtype bfloat16: each element an fp32's top 16 bits
  // torch_dtype int8: n * k int8 quants in [-127, 127]; int4: n * ceil(k / 2) bytes, two quants
  // in [-7, 7] per byte as nibbles q + 8, low nibble first (kernels/gemm.h, QuantizedWeightView).
  const uint8_t* q = nullptr;
  // int8 / int4: the fp32 scales [n, ceil(k / 32)], each finite and >= 0; the weight is
  // float(q) * scale.
  const float* scale = nullptr;
};

struct LayerWeights {
  const float* attn_norm = nullptr;
  const float* conv = nullptr;
  GemmTensor wqkv;
  GemmTensor wo;
  const float* decay_logit = nullptr;
  const float* feature_proj = nullptr;
  const float* feature_log_scale = nullptr;
  const float* gate_weight = nullptr;
  const float* gate_bias = nullptr;
  const float* mlp_norm = nullptr;
  GemmTensor w1;
  GemmTensor w2;
};

struct ModelWeights {
  const float* embed = nullptr;
  std::vector<LayerWeights> layers;
  const float* norm = nullptr;
  const float* lm_head = nullptr;
};

class Model {
 public:
  // Loads models/<name>/ given its folder: config.json + model.safetensors.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& dir);

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const { return name_; }  // folder's base name
  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // Hex SHA-256 (first 16 bytes, 32 hex chars) over config.json bytes then safetensors bytes
  // (so a BF16 export is another fingerprint than the F32 export it was rounded from).
  const std::string& fingerprint() const { return fingerprint_; }
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  Model() = default;
  std::string name_, dir_, fingerprint_;
  ModelConfig config_;
  ModelWeights weights_;
  size_t weight_bytes_ = 0;
  std::unique_ptr<SafetensorsFile> file_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_MODEL_MODEL_H_
