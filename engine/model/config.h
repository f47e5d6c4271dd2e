// Model configuration: the parsed, validated contents of models/<name>/config.json.
// Keys and meanings are documented in docs/model-format.md; the Python reference is
// tools/flatstate_ref/model.py (ModelConfig).
//
// Value type; thread-compatible. ParseModelConfig fails with InvalidArgument naming the file and
// the key for a missing, mistyped or out-of-range value.
#ifndef FLATSTATE_ENGINE_MODEL_CONFIG_H_
#define FLATSTATE_ENGINE_MODEL_CONFIG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace flatstate {

// The numeric values are stored in checkpoints: append, never renumber.
enum class AttentionKind {
  kSoftmax,
  kLinearElu,
  kCosformer,
  kCosine,
  kFavor,
  kGated,   // RFA with a gate (docs/kinds.md)
  kWindow,  // sliding-window softmax over the last window_size tokens
  kHybrid,  // elu+1 linear attention and window attention, per hybrid_layout
};

// "softmax", "linear_elu", "cosformer", "cosine", "favor", "gated", "window", "hybrid".
absl::string_view AttentionKindName(AttentionKind kind);
absl::StatusOr<AttentionKind> AttentionKindFromName(absl::string_view name);

// A model's chat format (config key "chat_template", docs/model-format.md): how a chat request's
// messages become prompt text. Fixed role prefixes, no template language. The defaults suit the
// shipped byte-level Shakespeare models: a play's dialogue.
struct ChatTemplate {
  std::string system;                        // before a system message's content
  std::string user = "ROMEO:\n";             // before a user message's content
  std::string assistant = "JULIET:\n";       // before an assistant message and the reply
  std::string separator = "\n\n";            // after each message's content
  std::vector<std::string> stop = {"\n\n"};  // always ends a chat reply
};

// hybrid_layout (docs/kinds.md): window layers even and linear layers odd, or both branches
// summed in every layer.
enum class HybridLayout { kAlternate, kSum };

// config key "torch_dtype": the element type of the layers' GEMM weights in model.safetensors
// (attn.wqkv, attn.wo, mlp.w1, mlp.w2: safetensors F32 or BF16, or for int8 / int4 the stored
// quantised layout, quants I8 or U8 plus an F32 "<name>_scale" tensor). Every other tensor is F32
// whatever it says (docs/model-format.md).
enum class TorchDtype { kFloat32, kBfloat16, kInt8, kInt4 };

// "float32", "bfloat16", "int8", "int4".
absl::string_view TorchDtypeName(TorchDtype dtype);

// The token mixer of one layer (ModelConfig::layer_attention). A linear branch keeps S, z, M
// (gated: S, z, n) and runs the kind's feature map (elu+1 for hybrid); a window branch keeps a
// ring of the last window_size rotated keys and values; a softmax layer attends over its K/V
// rows in the paged pool (RoPE) and keeps no fixed-size state.
// A Gated DeltaNet layer (delta; ModelConfig::delta) keeps its delta-rule state and its short
// convolution's window (kernels/gated_delta.h).
// A Mamba-2 layer (ssm; ModelConfig::ssm) keeps its SSM state and its convolution's window
// (engine/runtime/mixers/mamba2_mixer.h); an RWKV-7 layer (rwkv7; ModelConfig::rwkv) its wkv state
// and the token-shift rows of its time mix and channel mix (rwkv7_mixer.h); a GLA layer (gla;
// ModelConfig::gla) its state and, with short convolutions, their window (gla_mixer.h).
struct LayerAttention {
  bool linear = false;
  bool window = false;
  bool softmax = false;
  bool delta = false;
  bool ssm = false;
  bool rwkv7 = false;
  bool gla = false;
};

// The Gated DeltaNet layers' shape (Qwen3.5 / Qwen3-Next `linear_*` config keys; value_heads 0:
// the model has none). Per layer: q and k of key_heads x key_dim, v and the output gate z of
// value_heads x value_dim, a depthwise causal convolution of conv_kernel taps over q|k|v (0: none).
// fla's DeltaNet (delta_net) is the same rule without decay: decay false (g = 0; no A_log,
// dt_bias, a_proj), and its options: the output gate, beta, silu on q and k, beta's scale.
struct DeltaNetShape {
  int key_heads = 0, value_heads = 0;
  int key_dim = 0, value_dim = 0;
  int conv_kernel = 0;
  bool decay = true;        // g = -exp(A_log) softplus(a + dt_bias); false: g = 0 (DeltaNet)
  bool output_gate = true;  // o = RMSNorm(o) w silu(z); false: RMSNorm(o) w
  bool use_beta = true;     // beta = sigmoid(b); false: beta = 1
  bool qk_silu = true;      // silu on q and k (after the conv); false: identity (v keeps silu)
  float beta_scale = 1.f;   // beta's factor (fla's allow_neg_eigval: 2)
  int64_t key_width() const { return int64_t{key_heads} * key_dim; }
  int64_t value_width() const { return int64_t{value_heads} * value_dim; }
  int64_t conv_dim() const { return 2 * key_width() + value_width(); }
  // Floats of state per layer: S [value_heads][key_dim][value_dim] and the conv window.
  size_t state_floats() const {
    return size_t(value_heads) * key_dim * value_dim +
           (conv_kernel > 1 ? size_t(conv_kernel - 1) * conv_dim() : 0);
  }
};

// Mamba-2's layers (transformers Mamba2Config; heads 0: the model has none). Per layer: an input
// projection to z [inner] | xBC [conv_dim] | dt [heads], a depthwise causal convolution of
// conv_kernel taps (+ bias) over xBC = x [heads x head_dim] | B | C [groups x state_size each],
// the selective scan with one decay per head, a gated RMSNorm over groups of inner / groups.
struct SsmShape {
  int heads = 0, head_dim = 0;
  int state_size = 0;  // N
  int groups = 0;      // B / C groups (n_groups); head h reads group h / (heads / groups)
  int conv_kernel = 0;
  bool conv_bias = true;
  float dt_min = 0.f, dt_max = 0.f;  // time_step_limit: dt is clamped to [dt_min, dt_max]
  int64_t inner() const { return int64_t{heads} * head_dim; }
  int64_t bc_width() const { return int64_t{groups} * state_size; }
  int64_t conv_dim() const { return inner() + 2 * bc_width(); }
  // Floats of state per layer: S [heads][state_size][head_dim] and the conv window.
  size_t state_floats() const {
    return size_t(heads) * state_size * head_dim +
           (conv_kernel > 1 ? size_t(conv_kernel - 1) * conv_dim() : 0);
  }
};

// RWKV-7's layers (fla-hub RWKV7Config; heads 0: the model has none): heads x head_dim =
// hidden_size, the low ranks of the decay (w), in-context learning rate (a), value residual (v)
// and output gate (g) LoRAs, and the key normalisation (fuse_norm: fla's fused l2_norm).
struct Rwkv7Shape {
  int heads = 0, head_dim = 0;
  int decay_rank = 0, a_rank = 0, v_rank = 0, gate_rank = 0;
  bool fused_l2 = false;
  int64_t width() const { return int64_t{heads} * head_dim; }
  // Floats of state per layer: S [heads][head_dim][head_dim], the time mix's previous input
  // [hidden], the channel mix's [hidden].
  size_t state_floats() const { return size_t(heads) * head_dim * head_dim + 2 * size_t(width()); }
};

// fla's Gated Linear Attention layers (GLAConfig; heads 0: the model has none), after load: every
// head has its own q, k, v rows (fla's num_kv_heads groups are expanded at load), key_dim and
// value_dim per head; the per-key log decay is max(logsigmoid(gk_proj(x)) / gate_normalizer,
// clamp_min) with gk_proj a rank-gate_rank low-rank projection; an optional depthwise short
// convolution (conv_kernel taps; 0: none) over q|k|v; an optional swish output gate before the
// per-head RMSNorm (output_gate false: the norm alone).
struct GlaShape {
  int heads = 0;
  int key_dim = 0, value_dim = 0;  // per head
  int gate_rank = 16;
  int conv_kernel = 0;
  float gate_normalizer = 16.f;
  float clamp_min = -1e30f;  // no clamp unless the config sets one
  bool output_gate = true;
  bool fused_gate_norm = true;  // the norm's tensor is g_norm_swish_gate (else g_norm)
  int kv_groups = 1;            // fla's num_heads / num_kv_heads (expanded at load)
  int64_t key_width() const { return int64_t{heads} * key_dim; }
  int64_t value_width() const { return int64_t{heads} * value_dim; }
  int64_t qkv_dim() const { return 2 * key_width() + value_width(); }
  // Floats of state per layer: S [heads][key_dim][value_dim] and the conv window.
  size_t state_floats() const {
    return size_t(heads) * key_dim * value_dim +
           (conv_kernel > 1 ? size_t(conv_kernel - 1) * qkv_dim() : 0);
  }
};

// The channel mixer of every layer: flatstate's GELU MLP (w2 gelu(w1 x)) or SwiGLU (Llama's:
// down(silu(gate x) * up x), gate and up fused into w1 at load, gate rows first); none (Mamba-2:
// a layer is its token mixer alone); RWKV's channel mix (w2 relu(w1 lerp(x, x_prev, mu))^2, the
// previous row from the session's state).
enum class MlpKind { kGelu, kSwiGlu, kNone, kReluSquaredShift };

// The norms of the layer loop: RMSNorm (weight) or LayerNorm (weight and bias; RWKV).
enum class NormKind { kRms, kLayer };

// rope_scaling (Hugging Face's rope_type): none, "linear" (every frequency / factor) or "llama3"
// (long wavelengths / factor, short ones unchanged, smoothed between; transformers'
// _compute_llama3_parameters).
enum class RopeScalingType { kNone, kLinear, kLlama3 };
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
};

struct ModelConfig {
  // The architecture registry entry that read this config (engine/arch/registry.h): "flatstate"
  // for this project's own format, else the Hugging Face family ("llama", ...).
  std::string architecture = "flatstate";
  AttentionKind attention_kind = AttentionKind::kLinearElu;
  int vocab_size = 256;
  int hidden_size = 128;
  int num_hidden_layers = 4;
  int num_attention_heads = 4;
  int head_dim = 32;  // hidden_size / num_attention_heads
  int intermediate_size = 512;
  float rms_norm_eps = 1e-5f;
  float linear_eps = 1e-6f;
  int conv_kernel_size = 0;  // 0: no token-shift convolution
  float rope_theta = 10000.f;
  int64_t max_position_embeddings = int64_t{1} << 20;
  int cosformer_horizon = 1024;
  int favor_num_features = 64;
  int chunk_size = 64;        // default prefill chunk
  int window_size = 64;       // W: window, hybrid
  int rfa_num_features = 32;  // R: gated (feature size 2R)
  HybridLayout hybrid_layout = HybridLayout::kAlternate;
  TorchDtype torch_dtype = TorchDtype::kFloat32;  // the layers' GEMM weights in the file
  ChatTemplate chat_template;
  // Hugging Face families (flatstate's own format keeps the defaults):
  int num_key_value_heads = 0;  // K/V heads (grouped-query when < heads); 0: kv_heads() = heads
  MlpKind mlp_kind = MlpKind::kGelu;
  bool attention_bias = false;       // q, k, v and o projections carry biases
  bool mlp_bias = false;             // gate, up and down projections carry biases
  bool tie_word_embeddings = false;  // the output head is the embedding matrix
  bool norm_unit_offset = false;     // RMSNorm multiplies by (1 + w) (folded into w at load)
  bool qk_norm = false;              // per-head RMSNorm of q and k before RoPE (Qwen3)
  // Softmax layers multiply their attention output by sigmoid(gate), the gate rows following
  // q|k|v in wqkv (Qwen3.5 / Qwen3-Next `attn_output_gate`).
  bool attn_output_gate = false;
  // Gated DeltaNet layers: every layer that softmax_layer does not mark (Qwen3.5's layer_types).
  DeltaNetShape delta;
  // Mamba-2 layers: every layer when ssm.heads > 0.
  SsmShape ssm;
  // RWKV-7 layers: every layer when rwkv.heads > 0.
  Rwkv7Shape rwkv;
  // GLA layers: every layer that softmax_layer does not mark, when gla.heads > 0.
  GlaShape gla;
  NormKind norm_kind = NormKind::kRms;  // eps: rms_norm_eps
  int rotary_dim = 0;  // head_dim * partial_rotary_factor: RoPE's share of a head; 0: head_dim
  RopeScaling rope_scaling;
  // Token ids from config.json / generation_config.json; -1 / empty when the model has none.
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;

  // config key "layer_types" (kinds linear_elu, cosformer, cosine, favor): per layer "softmax" or
  // "recurrent" (the kind's own mixer). Empty: every layer is the kind's. A softmax layer of such a
  // model is the softmax kind's layer (RoPE, paged K/V, no conv).
  std::vector<bool> softmax_layer;

  // Some layer attends over a growing K/V cache (the softmax kind, or softmax layers in
  // layer_types): sessions hold KV blocks for those layers.
  bool has_kv() const;
  // No layer keeps a K/V cache: a session's whole memory is the fixed-size SessionState::linear
  // (recurrent state, conv window, ring), whatever the context length.
  bool is_linear() const { return !has_kv(); }
  // Some layer keeps fixed-size state (state_floats() > 0).
  bool has_state() const { return state_floats() > 0; }
  // Whether the kind runs the token-shift convolution (K > 0 and a kind that has it); a layer
  // runs it when this holds and it is not a softmax layer (layer_has_conv).
  bool has_conv() const;
  bool layer_has_conv(int layer) const { return has_conv() && !layer_attention(layer).softmax; }
  LayerAttention layer_attention(int layer) const;
  // The number of softmax layers (the KV pool's layers) and a softmax layer's index among them.
  int kv_layers() const;
  int kv_layer_index(int layer) const;
  // Size of phi(q) / phi(k) per head (first dimension of S); 0 for kinds without S.
  int feature_dim() const;
  // Floats of fixed-size state per session (engine/session/session_state.h: StateLayout).
  size_t state_floats() const;
  // Fixed-size state bytes per session (0 for softmax).
  size_t state_bytes() const;
  // fp32 KV bytes per token: 2 * kv_layers() * kv_dim() * 4 (0 without softmax layers).
  size_t kv_bytes_per_token() const;
  int kv_heads() const {
    return num_key_value_heads > 0 ? num_key_value_heads : num_attention_heads;
  }
  int rotary() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // Widths of a query (and attention output) row and of one K (or V) row. flatstate's own format
  // has heads * head_dim == hidden_size by definition, so its widths are the hidden size.
  int q_dim() const {
    return architecture == "flatstate" ? hidden_size : num_attention_heads * head_dim;
  }
  int kv_dim() const { return architecture == "flatstate" ? hidden_size : kv_heads() * head_dim; }
  // RoPE's inverse frequencies, rotary() / 2 of them: rope_theta^(-2i / rotary()) with
  // rope_scaling applied.
  std::vector<double> RopeInvFreq() const;
};

// What ListModels, /v1/models and sessions report as the model's attention kind: flatstate's own
// models their kind's name (AttentionKindName: linear_elu, ..., softmax, hybrid); the registry's
// other architectures (their attention_kind field is a placeholder, layer_attention decides)
// "softmax" when every layer keeps a K/V cache, "recurrent" when none does (a session's memory
// is fixed), "hybrid" when both kinds of layer are there.
std::string ModelKindName(const ModelConfig& c);

// Parses and validates config.json text of flatstate's own format (the "flatstate" architecture;
// engine/arch/registry.h picks the reader for any config.json). `path` only appears in error
// messages.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text, absl::string_view path);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_MODEL_CONFIG_H_
