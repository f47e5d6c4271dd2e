#include "engine/arch/hf_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace flatstate {

const nlohmann::json* HfConfigReader::Get(const std::string& key) {
  read_.insert(key);
  auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}

absl::Status HfConfigReader::Bad(const std::string& key, absl::string_view why) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": config key '", key, "' ", why));
}

absl::Status HfConfigReader::Int(const std::string& key, bool required, int64_t lo, int64_t hi,
                                 int* out) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return required ? Bad(key, "is missing") : absl::OkStatus();
  if (!v->is_number_integer()) return Bad(key, "must be an integer");
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    return Bad(key, absl::StrCat("= ", x, " is out of range [", lo, ", ", hi, "]"));
  }
  *out = static_cast<int>(x);
  return absl::OkStatus();
}

absl::Status HfConfigReader::Positive(const std::string& key, double* out) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_number()) return Bad(key, "must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x <= 0) return Bad(key, "must be a finite number > 0");
  *out = x;
  return absl::OkStatus();
}

absl::Status HfConfigReader::Bool(const std::string& key, bool* out) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return Bad(key, "must be true or false");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status HfConfigReader::TokenIds(const std::string& key, int vocab,
                                      std::vector<int32_t>* out) {
  const nlohmann::json* v = Get(key);
  if (v == nullptr) return absl::OkStatus();
  const nlohmann::json list = v->is_array() ? *v : nlohmann::json::array({*v});
  out->clear();
  for (const nlohmann::json& x : list) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= vocab) {
      return Bad(key, absl::StrCat("holds ", x.dump(), ", not a token id in [0, vocab_size = ",
                                   vocab, ")"));
    }
    out->push_back(x.get<int32_t>());
  }
  return absl::OkStatus();
}

void HfConfigReader::Known(std::initializer_list<const char*> keys) {
  for (const char* k : keys) read_.insert(k);
}

std::vector<std::string> HfConfigReader::Unread() const {
  std::vector<std::string> out;
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (read_.count(it.key()) == 0) out.push_back(it.key());
  }
  return out;
}

}  // namespace flatstate
