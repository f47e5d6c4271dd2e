#include "engine/model/generation_config.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace flatstate {

absl::Status ApplyGenerationConfig(std::string_view text, absl::string_view path,
                                   ModelConfig* c) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  auto id_ok = [&](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < c->vocab_size;
  };
  std::vector<int32_t> eos = c->eos_token_ids;
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    const nlohmann::json list = it->is_array() ? *it : nlohmann::json::array({*it});
    for (const nlohmann::json& v : list) {
      if (!id_ok(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": key 'eos_token_id' = ", v.dump(),
                         " is not a token id in [0, vocab_size = ", c->vocab_size, ")"));
      }
      const int32_t id = v.get<int32_t>();
      if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
    }
  }
  c->eos_token_ids = std::move(eos);
  if (auto it = j.find("bos_token_id"); it != j.end() && id_ok(*it) && c->bos_token_id < 0) {
    c->bos_token_id = it->get<int32_t>();
  }
  return absl::OkStatus();
}

}  // namespace flatstate
