// The models a server serves: ModelRegistry owns one LoadedModel (name + Engine) per subfolder of
// --models_dir that holds a config.json, and knows the default model.
//
// Thread-safety: the set of models, their names, configs and fingerprints never change after
// construction, so Find* and names() are safe from any thread. Each model's Engine is driven by
// the engine loop thread only. Failures: Load fails with NotFound when the folder has no model,
// with the first model's load error, or with InvalidArgument for an unknown --default_model;
// Resolve fails with InvalidArgument naming the `model` field.
#ifndef FLATSTATE_SERVER_CORE_MODEL_REGISTRY_H_
#define FLATSTATE_SERVER_CORE_MODEL_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/runtime/engine.h"

namespace flatstate::server {

struct LoadedModel {
  std::string name;
  std::unique_ptr<Engine> engine;

  const ModelConfig& config() const { return engine->config(); }
  // The model's tokenizer (Model::tokenizer(); thread-safe).
  const Tokenizer& tokenizer() const { return engine->model().tokenizer(); }
  // The engine's (Engine::fingerprint: the model's, with the weight type when quantised).
  const std::string& fingerprint() const { return engine->fingerprint(); }
};

class ModelRegistry {
 public:
  // Loads every model under `dir` (sorted by name) with `opts`, all on one ThreadPool of
  // opts.threads threads that the registry owns (opts.thread_pool is ignored); the default is
  // PickDefaultModel(names, requested_default). A folder that does not load (bad checkpoint,
  // unknown architecture, engine refusal) is skipped and named in notes(); InvalidArgument with
  // every folder's reason when none loads.
  static absl::StatusOr<ModelRegistry> Load(const std::string& dir, const EngineOptions& opts,
                                            const std::string& requested_default);
  // Takes `models` (names unique) as they are; `default_model` should be one of them (an empty
  // registry with an empty default is valid: validation-only uses).
  ModelRegistry(std::vector<std::unique_ptr<LoadedModel>> models, std::string default_model);

  ModelRegistry(ModelRegistry&&) = default;
  ModelRegistry& operator=(ModelRegistry&&) = default;

  const std::vector<std::unique_ptr<LoadedModel>>& models() const { return models_; }
  const std::string& default_model() const { return default_model_; }
  // Null when no model has that name / fingerprint.
  LoadedModel* Find(absl::string_view name) const;
  LoadedModel* FindByFingerprint(absl::string_view fingerprint) const;
  // `name`, or the default model when `name` is empty; InvalidArgument
  // "model: unknown model 'x' (loaded: a, b)" when there is none.
  absl::StatusOr<LoadedModel*> Resolve(absl::string_view name) const;
  // "a, b" for error messages.
  std::string Names() const;
  // What Load has to tell the operator, one line each: "skipped model folder '<dir>': <why>" and
  // "model '<name>': config.json keys ignored: a, b" (the server prints them at start).
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  // The one pool every model's engine runs its steps on (--threads); declared before models_ so
  // that the engines are destroyed first. Null for a registry built from given models.
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::unique_ptr<LoadedModel>> models_;
  std::string default_model_;
  std::vector<std::string> notes_;
};

// `requested` if non-empty (InvalidArgument if not among `names`); else the first name (sorted)
// containing "linear-elu" or "linear_elu"; else the first name. NotFound for no names.
absl::StatusOr<std::string> PickDefaultModel(const std::vector<std::string>& names,
                                             const std::string& requested);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_CORE_MODEL_REGISTRY_H_
