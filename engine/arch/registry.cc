// The registry: every Architecture flatstate serves, in one list. Adding a family adds its entry
// here (and its files under engine/arch/, its mixers and ops, and their tests).
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/arch/architecture.h"
#include "engine/arch/delta_net_arch.h"
#include "engine/arch/flatstate_arch.h"
#include "engine/arch/gated_deltanet_arch.h"
#include "engine/arch/gla_arch.h"
#include "engine/arch/llama_arch.h"
#include "engine/arch/mamba2_arch.h"
#include "engine/arch/qwen35_arch.h"
#include "engine/arch/rwkv7_arch.h"

namespace flatstate {
namespace {

const std::vector<const Architecture*>& Registry() {
  static const FlatstateArchitecture flatstate_arch;
  static const LlamaArchitecture llama_arch(LlamaArchitecture::Family::kLlama);
  static const LlamaArchitecture qwen2_arch(LlamaArchitecture::Family::kQwen2);
  static const LlamaArchitecture qwen3_arch(LlamaArchitecture::Family::kQwen3);
  static const Qwen35Architecture qwen35_arch;
  static const Mamba2Architecture mamba2_arch;
  static const Rwkv7Architecture rwkv7_arch;
  static const GlaArchitecture gla_arch;
  static const GatedDeltaNetArchitecture gated_deltanet_arch;
  static const DeltaNetArchitecture delta_net_arch;
  static const std::vector<const Architecture*> all = {
      &flatstate_arch, &llama_arch, &qwen2_arch, &qwen3_arch,          &qwen35_arch,
      &mamba2_arch,    &rwkv7_arch, &gla_arch,   &gated_deltanet_arch, &delta_net_arch};
  return all;
}

}  // namespace

std::string SupportedArchitectures() {
  std::vector<std::string> names;
  for (const Architecture* a : Registry()) {
    for (absl::string_view n : a->class_names()) names.emplace_back(n);
  }
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<const Architecture*> SelectArchitecture(const nlohmann::json& j,
                                                       absl::string_view path) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": top level must be a JSON object"));
  }
  auto arch_it = j.find("architectures");
  if (arch_it != j.end() && !arch_it->is_null()) {
    if (!arch_it->is_array() || arch_it->empty() || !(*arch_it)[0].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": config key 'architectures' must be a non-empty list of class names"));
    }
    const std::string cls = (*arch_it)[0].get<std::string>();
    for (const Architecture* a : Registry()) {
      for (absl::string_view n : a->class_names()) {
        if (n == cls) return a;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": config key 'architectures' names '", cls,
                     "', which is not supported (supported: ", SupportedArchitectures(), ")"));
  }
  auto type_it = j.find("model_type");
  if (type_it != j.end() && type_it->is_string()) {
    for (const Architecture* a : Registry()) {
      if (a->model_type() == type_it->get<std::string>()) return a;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": config key 'model_type' = ", type_it->dump(),
                     " is not supported (supported: ", SupportedArchitectures(), ")"));
  }
  // Neither key: flatstate's own format (whose reader names a missing attention_kind).
  return Registry().front();
}

}  // namespace flatstate
