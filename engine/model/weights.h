// The weights of a loaded model as the layer loop reads them: pointers into the memory-mapped
// weight files, or into converted / fused copies an Architecture made at load (TensorStore).
//
// Value types of pointers; they own nothing and are valid while the Model that filled them
// lives. TensorStore owns the copies; it is not thread-safe while filled (Model::Load) and
// immutable afterwards.
#ifndef FLATSTATE_ENGINE_MODEL_WEIGHTS_H_
#define FLATSTATE_ENGINE_MODEL_WEIGHTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace flatstate {

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

// The biases (Hugging Face families with attention_bias / mlp_bias; null otherwise) are F32 rows
// added after their GEMM: bqkv [q_dim + 2 kv_dim] (q|k|v fused like wqkv), bo [D], b1 [rows of
// w1], b2 [D].
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
  const float* bqkv = nullptr;
  const float* bo = nullptr;
  const float* q_norm = nullptr;  // [head_dim] (ModelConfig::qk_norm)
  const float* k_norm = nullptr;
  const float* b1 = nullptr;
  const float* b2 = nullptr;
  // Gated DeltaNet layers (ModelConfig::delta): wqkv is q|k|v [conv_dim, D], conv the depthwise
  // convolution [conv_dim, K], wzba the output gate z, then b and a [value_width + 2 Hv, D];
  // A_log and dt_bias [Hv]; delta_norm the gated RMSNorm's weight [value_dim]; wo [D, value_width].
  GemmTensor wzba;
  const float* A_log = nullptr;
  const float* dt_bias = nullptr;
  const float* delta_norm = nullptr;
  // Mamba-2 layers (ModelConfig::ssm): wqkv is in_proj's xBC rows [conv_dim, D], wzba its z and dt
  // rows [inner + heads, D]; conv [conv_dim, K] and conv_bias [conv_dim] (null: none); A_log,
  // dt_bias and ssm_D [heads]; delta_norm the gated RMSNorm's weight [inner]; wo [D, inner].
  const float* conv_bias = nullptr;
  const float* ssm_D = nullptr;
  // LayerNorm biases (ModelConfig::norm_kind kLayer; null otherwise).
  const float* attn_norm_bias = nullptr;
  const float* mlp_norm_bias = nullptr;
  // RWKV-7 layers (ModelConfig::rwkv; engine/runtime/mixers/rwkv7_mixer.h): wo is o_proj; w1 / w2
  // the channel mix's key [I, D] / value [D, I] and mlp_mix its token-shift lerp [D].
  struct Rwkv7 {
    const float* mix = nullptr;  // x_r | x_w | x_k | x_v | x_a | x_g  [6][D]
    GemmTensor wr, wk, wv;       // [D, D]
    GemmTensor w_lora1, w_lora2, a_lora1, a_lora2, v_lora1, v_lora2, g_lora1, g_lora2;
    const float* w_bias = nullptr;  // [D] each
    const float* a_bias = nullptr;
    const float* v_bias = nullptr;  // null on layer 0 (no value residual)
    const float* k_k = nullptr;     // [D]
    const float* k_a = nullptr;     // [D]
    const float* r_k = nullptr;     // [heads, head_dim]
    const float* gn_w = nullptr;    // g_norm [D]
    const float* gn_b = nullptr;
  } rwkv;
  const float* mlp_mix = nullptr;
  // GLA layers (ModelConfig::gla; engine/runtime/mixers/gla_mixer.h): wqkv is q|k|v [qkv_dim, D]
  // (fla's kv groups expanded per head), conv the fused q|k|v short convolution [qkv_dim, K]
  // (null: none), wzba the output gate g_proj [value_width, D] (absent without one), delta_norm the
  // per-head RMSNorm weight [value_dim], wo o_proj; gk1 [gate_rank, D] and gk2 [key_width,
  // gate_rank] + gk_bias [key_width] the low-rank decay projection.
  struct Gla {
    GemmTensor gk1, gk2;
    const float* gk_bias = nullptr;
  } gla;
};

struct ModelWeights {
  const float* embed = nullptr;
  std::vector<LayerWeights> layers;
  const float* norm = nullptr;
  const float* norm_bias = nullptr;  // LayerNorm models
  const float* lm_head = nullptr;
};

// Tensors made at load (a BF16 norm widened to F32, q|k|v rows concatenated, (1 + w) folded):
// each allocation stays at its address until the store is destroyed.
class TensorStore {
 public:
  float* NewF32(size_t n) { return f32_.emplace_back(n).data(); }
  uint16_t* NewBf16(size_t n) { return bf16_.emplace_back(n).data(); }
  size_t bytes() const;

 private:
  std::vector<std::vector<float>> f32_;  // a vector's buffer keeps its address when moved
  std::vector<std::vector<uint16_t>> bf16_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_MODEL_WEIGHTS_H_
