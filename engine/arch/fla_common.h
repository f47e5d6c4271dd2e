// What flash-linear-attention's (fla) Hugging Face models share, for their architecture entries
// (engine/arch/gla_arch.h, engine/arch/gated_deltanet_arch.h): the block around the token mixer
// (fla/models/*/modeling_*.py: h += mixer(RMSNorm(h)); h += GatedMLP(RMSNorm(h)); logits =
// RMSNorm(h) lm_head^T) and the config keys of every fla config class.
//
// Stateless functions; errors are InvalidArgument naming the config file and the key.
#ifndef FLATSTATE_ENGINE_ARCH_FLA_COMMON_H_
#define FLATSTATE_ENGINE_ARCH_FLA_COMMON_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/arch/hf_config.h"
#include "engine/arch/hf_tensors.h"
#include "engine/model/config.h"
#include "engine/model/weight_files.h"
#include "engine/model/weights.h"

namespace flatstate {

// Reads the keys every fla model has: vocab_size, hidden_size, num_hidden_layers (required);
// intermediate_size, else fla's GatedMLP size from hidden_ratio (default 4): int(hidden_size *
// hidden_ratio * 2 / 3) rounded up to a multiple of 256; norm_eps (1e-6, every norm of the
// model), tie_word_embeddings (false), bos/eos_token_id, hidden_act ("swish" only: GatedMLP's);
// refuses attnres_block_size when set (attn is ReadFlaAttn's); marks known the
// keys that do not change the math (fuse_*, use_l2warp, attn_mode, max_position_embeddings: no
// positions, initializer_range, use_cache, ...). Sets mlp_kind SwiGLU and an unbounded position
// limit.
absl::Status ReadFlaCommon(HfConfigReader& r, ModelConfig* c);

// A number key that may be absent or null (then *out is left).
absl::Status ReadFlaNumber(HfConfigReader& r, const std::string& key, double* out);

// Refuses a key that is present and not null (fla's default None), saying `why`.
absl::Status RequireFlaNull(HfConfigReader& r, const std::string& key, absl::string_view why);

// fla's hybrid softmax-attention layers (fla/models/hybrid.py normalize_hybrid_attention_config,
// fla/layers/attn.py Attention): config key attn, null (none), one spec or a list of specs, each
// {layers (required, indices in [0, num_hidden_layers), each in one spec only), num_heads
// (required), num_kv_heads (num_heads), qkv_bias (false), window_size (null; a window is refused),
// rope_theta (10000)}. Every spec must agree on the keys other than layers (the engine's softmax
// layers share one shape). Marks c->softmax_layer and gives those layers num_heads heads of
// head_dim = hidden_size / num_heads (even), num_kv_heads K/V heads, RoPE over the whole head
// with rope_theta, attention_bias = qkv_bias (q, k, v only). Call after the entry's own heads
// (attn replaces num_attention_heads / num_key_value_heads / head_dim when set). A spec's keys
// that fla keeps but never reads are appended to `ignored` as attn.<key>.
absl::Status ReadFlaAttn(HfConfigReader& r, ModelConfig* c, std::vector<std::string>* ignored);

// The end of every fla entry's ReadConfig: ReadFlaAttn, then *ignored = the reader's unread keys
// and attn's ignored ones.
absl::Status FinishFlaConfig(HfConfigReader& r, ModelConfig* c, std::vector<std::string>* ignored);

// Appends a delta-rule layer's model.layers.i.attn.{q,k,v}_proj.weight ([Kw, D], [Kw, D],
// [Vw, D], fused into wqkv) and, when dn.conv_kernel > 0, their short convolutions
// .{q,k,v}_conv1d.weight [width, 1, K] (into conv); `a` is the "model.layers.i.attn." prefix.
void AddFlaDeltaQkvTensors(const std::string& a, const DeltaNetShape& dn, int64_t D,
                           LayerWeights* l, std::vector<HfTensor>* t);

// Appends softmax layer i's model.layers.i.attn.q_proj.weight [H hd, D], .k_proj.weight /
// .v_proj.weight [KV hd, D] (fused into wqkv; their .bias fused into bqkv when attention_bias)
// and .o_proj.weight [D, H hd].
void AddFlaAttnTensors(const ModelConfig& c, int i, LayerWeights* l, std::vector<HfTensor>* t);

// Appends layer i's block tensors to `t`: model.layers.i.attn_norm.weight, .mlp_norm.weight [D],
// the GatedMLP's .mlp.gate_proj|up_proj.weight (fused into w1) and .mlp.down_proj.weight.
void AddFlaBlockTensors(const ModelConfig& c, int i, LayerWeights* l, std::vector<HfTensor>* t);
// Appends model.embeddings.weight [V, D], model.norm.weight [D] and lm_head.weight [V, D] (absent
// when tied; then BindFlaModel points the head at the embedding).
void AddFlaModelTensors(const ModelConfig& c, ModelWeights* w, std::vector<HfTensor>* t);
// BindHfTensors for `family` (the class name), then the tied head.
absl::Status BindFlaModel(const std::vector<HfTensor>& t, absl::string_view family,
                          const WeightFiles& files, ModelConfig* config, TensorStore* store,
                          ModelWeights* w);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_FLA_COMMON_H_
