// The architecture registry: what a model folder's config.json selects, and everything that
// differs between model families above the kernels, declared in one place per family.
//
// An Architecture reads its config.json (validation errors name the file and the key), and binds
// the weight files' tensors to ModelWeights by its tensor table (names, shapes, dtype rules,
// optional and tied tensors, load-time fusions such as q|k|v into one GEMM weight). The layer loop
// (engine/runtime/device_forward.h) then runs any ModelConfig, whoever filled it in; the per-layer
// structure and state layout follow from the config (ModelConfig::layer_attention, mlp_kind,
// engine/session/session_state.h: StateLayout).
//
// Entries are stateless singletons; thread-safe. SelectArchitecture fails with InvalidArgument
// naming the config file and the key ("architectures" / "model_type") and listing what is
// supported.
#ifndef FLATSTATE_ENGINE_ARCH_ARCHITECTURE_H_
#define FLATSTATE_ENGINE_ARCH_ARCHITECTURE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/config.h"
#include "engine/model/weight_files.h"
#include "engine/model/weights.h"
#include "nlohmann/json.hpp"

namespace flatstate {

class Architecture {
 public:
  virtual ~Architecture() = default;
  // The registry name, stored in ModelConfig::architecture ("flatstate", "llama", "qwen2").
  virtual absl::string_view name() const = 0;
  // The Hugging Face class names (config "architectures") this entry reads, e.g.
  // "LlamaForCausalLM"; and its "model_type".
  virtual std::vector<absl::string_view> class_names() const = 0;
  virtual absl::string_view model_type() const = 0;
  // Parses and validates config.json (`text`, already parsed as `j`); `path` for messages.
  // Keys this entry does not know and that do not change the math are appended to `ignored`.
  virtual absl::StatusOr<ModelConfig> ParseConfig(absl::string_view text, const nlohmann::json& j,
                                                  absl::string_view path,
                                                  std::vector<std::string>* ignored) const = 0;
  // Points `weights` at the files' tensors, or at converted or fused copies kept in `store`,
  // checking every name, shape, dtype and value rule of the table; errors name the file and the
  // tensor. `config` may be updated where the files decide (the stored GEMM type).
  virtual absl::Status BindWeights(ModelConfig* config, const WeightFiles& files,
                                   TensorStore* store, ModelWeights* weights) const = 0;
  // The family's own chat format as a Jinja chat template, for folders whose tokenizer ships
  // none (RWKV's "User: ...\n\nAssistant:"), with the strings that end a reply in it; empty: none.
  struct ChatFormat {
    std::string_view jinja;
    std::vector<std::string> stop;
  };
  virtual ChatFormat default_chat_format() const { return {}; }
};

// The entry for a parsed config.json: by "architectures"[0] (a Hugging Face class name), else by
// "model_type"; a config with neither is flatstate's own format.
absl::StatusOr<const Architecture*> SelectArchitecture(const nlohmann::json& j,
                                                       absl::string_view path);

// "FlatstateForCausalLM, LlamaForCausalLM, ..." (for messages and docs).
std::string SupportedArchitectures();

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_ARCHITECTURE_H_
