// Loading the models a server serves: one Engine per subfolder of --models_dir that holds a
// config.json, and the choice of the default model.
//
// LoadModels is called once at startup (not thread-safe with anything else); the returned
// LoadedModel values are immutable apart from their Engine, which only the engine loop drives.
// Reading name/config/fingerprint from any thread is safe. Fails with NotFound when the folder
// has no model, or with the first model's load error (naming its folder).
#ifndef FLATSTATE_SERVER_MODEL_REGISTRY_H_
#define FLATSTATE_SERVER_MODEL_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/engine.h"

namespace flatstate::server {

struct LoadedModel {
  std::string name;
  std::unique_ptr<Engine> engine;

  const ModelConfig& config() const { return engine->config(); }
  const std::string& fingerprint() const { return engine->model().fingerprint(); }
};

// Models sorted by name.
absl::StatusOr<std::vector<std::unique_ptr<LoadedModel>>> LoadModels(const std::string& dir,
                                                                      const EngineOptions& opts);

// `requested` if non-empty (InvalidArgument if not among `names`); else the first name (sorted)
// containing "linear-elu" or "linear_elu"; else the first name.
absl::StatusOr<std::string> PickDefaultModel(const std::vector<std::string>& names,
                                             const std::string& requested);

}  // namespace flatstate::server

#endif  // FLATSTATE_SERVER_MODEL_REGISTRY_H_
