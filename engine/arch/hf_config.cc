#include "engine/arch/hf_config.h"

#include <cmath>
#include <cstdint>

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

absl::Status HfConfigReader::RequireBool(const std::string& key, bool want) {
  bool v = want;
  if (absl::Status s = Bool(key, &v); !s.ok()) return s;
  if (v != want) return Bad(key, absl::StrCat("= ", v ? "true" : "false", " is not supported"));
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
      return Bad(key, absl::StrCat("holds ", x.dump(),
                                   ", not a token id in [0, vocab_size = ", vocab, ")"));
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

std::string JsonFromPython(absl::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      out.push_back(ch);
      if (ch == '\\' && i + 1 < text.size()) {
        out.push_back(text[++i]);
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') in_string = true;
    bool replaced = false;
    for (absl::string_view lit : {"NaN", "Infinity", "-Infinity"}) {
      if (text.substr(i, lit.size()) == lit) {
        absl::StrAppend(&out, "\"", lit, "\"");
        i += lit.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out.push_back(ch);
  }
  return out;
}

absl::Status ReadDecoderBasics(HfConfigReader& r, ModelConfig* c) {
  constexpr int64_t kBig = 1 << 16;
  if (absl::Status s = r.Int("vocab_size", true, 1, 1 << 24, &c->vocab_size); !s.ok()) return s;
  if (absl::Status s = r.Int("hidden_size", true, 1, kBig, &c->hidden_size); !s.ok()) return s;
  if (absl::Status s = r.Int("intermediate_size", true, 1, 1 << 20, &c->intermediate_size);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = r.Int("num_hidden_layers", true, 1, 1024, &c->num_hidden_layers); !s.ok()) {
    return s;
  }
  if (absl::Status s = r.Int("num_attention_heads", true, 1, 1024, &c->num_attention_heads);
      !s.ok()) {
    return s;
  }
  c->num_key_value_heads = c->num_attention_heads;
  if (absl::Status s = r.Int("num_key_value_heads", false, 1, 1024, &c->num_key_value_heads);
      !s.ok()) {
    return s;
  }
  if (c->num_attention_heads % c->num_key_value_heads != 0) {
    return r.Bad("num_key_value_heads",
                 absl::StrCat("= ", c->num_key_value_heads,
                              " does not divide num_attention_heads = ", c->num_attention_heads));
  }
  double eps = c->rms_norm_eps;
  if (absl::Status s = r.Positive("rms_norm_eps", &eps); !s.ok()) return s;
  c->rms_norm_eps = static_cast<float>(eps);
  int max_pos = static_cast<int>(c->max_position_embeddings);
  if (absl::Status s = r.Int("max_position_embeddings", false, 1, INT32_MAX, &max_pos); !s.ok()) {
    return s;
  }
  c->max_position_embeddings = max_pos;
  int bos = -1;
  if (absl::Status s = r.Int("bos_token_id", false, 0, c->vocab_size - 1, &bos); !s.ok()) return s;
  c->bos_token_id = bos;
  return r.TokenIds("eos_token_id", c->vocab_size, &c->eos_token_ids);
}

}  // namespace flatstate
