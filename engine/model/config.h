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

enum class AttentionKind { kSoftmax, kLinearElu, kCosformer, kCosine, kFavor };

// "softmax", "linear_elu", "cosformer", "cosine", "favor".
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

struct ModelConfig {
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
  int chunk_size = 64;  // default prefill chunk
  ChatTemplate chat_template;

  bool is_linear() const { return attention_kind != AttentionKind::kSoftmax; }
  // Size of phi(q) / phi(k) per head (first dimension of S).
  int feature_dim() const;
  // Floats of recurrent state per layer: H*(F*hd + F + 1) + (K-1)*D.
  size_t state_floats_per_layer() const;
  // Recurrent state bytes per session (linear kinds; 0 for softmax).
  size_t state_bytes() const;
  // fp32 KV bytes per token (softmax): 2 * layers * hidden * 4.
  size_t kv_bytes_per_token() const;
};

// Parses and validates config.json text. `path` only appears in error messages.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text, absl::string_view path);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_MODEL_CONFIG_H_
