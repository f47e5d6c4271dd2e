// A loaded model: config, memory-mapped weights, fingerprint. The folder's config.json selects
// its architecture (engine/arch/architecture.h: flatstate's own format, or a Hugging Face family
// such as LlamaForCausalLM), which reads the config and binds the tensors; the weights are
// model.safetensors or the shards of model.safetensors.index.json (engine/model/weight_files.h),
// and a Hugging Face folder's generation_config.json adds its end-of-sequence ids.
//
// Owns the mappings of the weight files and the tensors made at load (TensorStore); every pointer
// in ModelWeights points into one of them and stays valid for the Model's lifetime. Immutable
// after Load, so thread-safe for concurrent readers. Load fails (never crashes) with an error
// naming the file and, where one is involved, the tensor or the config key: NotFound for a missing
// file or shard, InvalidArgument/DataLoss for malformed content (engine/model/safetensors.h,
// weight_files.h), InvalidArgument for an unknown architecture, a tensor that is missing,
// unexpected, of the wrong shape or of a dtype its name does not take (flatstate's format: BF16
// only for the four GEMM weights and only with torch_dtype "bfloat16", likewise the int8 / int4
// layouts with their scale tensors; Hugging Face families: F32, BF16 or F16 anywhere), a stored
// int8 / int4 weight with a quant out of range or a scale that is not a finite number >= 0, and a
// norm weight that is not finite.
#ifndef FLATSTATE_ENGINE_MODEL_MODEL_H_
#define FLATSTATE_ENGINE_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/chat/chat_prompt.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/tokenizer/tokenizer.h"

namespace flatstate {

class WeightFiles;

class Model {
 public:
  // Loads models/<name>/ given its folder.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& dir);

  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& name() const { return name_; }  // folder's base name
  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // Hex SHA-256 (first 16 bytes, 32 hex chars) over config.json bytes then the weight files'
  // bytes in WeightFiles order (so a BF16 export is another fingerprint than the F32 export it
  // was rounded from).
  const std::string& fingerprint() const { return fingerprint_; }
  // Bytes of the tensors the model uses, as stored in the files.
  size_t weight_bytes() const { return weight_bytes_; }
  // Text <-> token ids for this model (vocab_size and special ids from its config).
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // The chat template (Hugging Face folders whose tokenizer_config.json or chat_template.jinja has
  // one); null otherwise, and then chat_prompt_status() says why: NotFound naming the model when
  // the folder ships no template, the template's parse error when it does not compile (the model
  // still serves completions).
  const ChatPrompt* chat_prompt() const { return chat_prompt_.get(); }
  const absl::Status& chat_prompt_status() const { return chat_prompt_status_; }
  // config.json keys the architecture does not know and ignored (they do not change the math);
  // the server lists them once when it loads the model.
  const std::vector<std::string>& ignored_config_keys() const { return ignored_keys_; }

 private:
  Model() = default;
  std::string name_, dir_, fingerprint_;
  ModelConfig config_;
  ModelWeights weights_;
  size_t weight_bytes_ = 0;
  std::vector<std::string> ignored_keys_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatPrompt> chat_prompt_;
  absl::Status chat_prompt_status_;
  std::unique_ptr<WeightFiles> files_;
  TensorStore store_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_MODEL_MODEL_H_
