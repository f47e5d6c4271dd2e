#include "server/core/model_registry.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/util/status_macros.h"

namespace flatstate::server {

ModelRegistry::ModelRegistry(std::vector<std::unique_ptr<LoadedModel>> models,
                             std::string default_model)
    : models_(std::move(models)), default_model_(std::move(default_model)) {}

absl::StatusOr<ModelRegistry> ModelRegistry::Load(const std::string& dir, const EngineOptions& opts,
                                                  const std::string& requested_default) {
  std::error_code ec;
  std::vector<std::string> folders;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "config.json")) {
      folders.push_back(entry.path().string());
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat("models_dir ", dir, ": ", ec.message()));
  if (folders.empty()) {
    return absl::NotFoundError(
        absl::StrCat("models_dir ", dir, " has no model folder (a subfolder with config.json)"));
  }
  std::sort(folders.begin(), folders.end());
  std::vector<std::unique_ptr<LoadedModel>> out;
  std::vector<std::string> notes;
  auto pool = std::make_unique<ThreadPool>(opts.threads);  // <= 0: all cores
  EngineOptions shared = opts;
  shared.thread_pool = pool.get();
  for (const std::string& f : folders) {
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(f);
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        model.ok() ? Engine::Create(std::move(*model), shared)
                   : absl::StatusOr<std::unique_ptr<Engine>>(model.status());
    if (!engine.ok()) {
      notes.push_back(absl::StrCat("skipped model folder '", f, "': ", engine.status().ToString()));
      continue;
    }
    auto m = std::make_unique<LoadedModel>();
    m->name = (*engine)->model().name();
    if (const auto& ignored = (*engine)->model().ignored_config_keys(); !ignored.empty()) {
      notes.push_back(absl::StrCat("model '", m->name,
                                   "': config.json keys ignored: ", absl::StrJoin(ignored, ", ")));
    }
    m->engine = *std::move(engine);
    out.push_back(std::move(m));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("models_dir ", dir, ": no model loaded (", absl::StrJoin(notes, "; "), ")"));
  }
  std::vector<std::string> names;
  for (const auto& m : out) names.push_back(m->name);
  ASSIGN_OR_RETURN(std::string def, PickDefaultModel(names, requested_default));
  ModelRegistry reg(std::move(out), std::move(def));
  reg.pool_ = std::move(pool);
  reg.notes_ = std::move(notes);
  return reg;
}

LoadedModel* ModelRegistry::Find(absl::string_view name) const {
  for (const auto& m : models_) {
    if (m->name == name) return m.get();
  }
  return nullptr;
}

LoadedModel* ModelRegistry::FindByFingerprint(absl::string_view fingerprint) const {
  for (const auto& m : models_) {
    if (m->fingerprint() == fingerprint) return m.get();
  }
  return nullptr;
}

absl::StatusOr<LoadedModel*> ModelRegistry::Resolve(absl::string_view name) const {
  LoadedModel* m = Find(name.empty() ? absl::string_view(default_model_) : name);
  if (m == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: unknown model '", name, "' (loaded: ", Names(), ")"));
  }
  return m;
}

std::string ModelRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& m : models_) names.push_back(m->name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<std::string> PickDefaultModel(const std::vector<std::string>& names,
                                             const std::string& requested) {
  if (!requested.empty()) {
    if (std::find(names.begin(), names.end(), requested) == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("default_model: unknown model '", requested,
                                                     "' (loaded: ", absl::StrJoin(names, ", "),
                                                     ")"));
    }
    return requested;
  }
  if (names.empty()) return absl::NotFoundError("no models loaded");
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  for (const std::string& n : sorted) {
    if (n.find("linear-elu") != std::string::npos || n.find("linear_elu") != std::string::npos) {
      return n;
    }
  }
  return sorted.front();
}

}  // namespace flatstate::server
