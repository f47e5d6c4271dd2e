// Reading a Hugging Face config.json: typed keys with range checks, and the list of keys nobody
// read (Architecture::ParseConfig's `ignored`).
//
// Each read marks its key as known. Errors are InvalidArgument "<path>: config key '<key>' ..."
// naming what was wrong. Not thread-safe (one per parse).
#ifndef FLATSTATE_ENGINE_ARCH_HF_CONFIG_H_
#define FLATSTATE_ENGINE_ARCH_HF_CONFIG_H_

#include <cstdint>
#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/model/config.h"
#include "nlohmann/json.hpp"

namespace flatstate {

class HfConfigReader {
 public:
  HfConfigReader(const nlohmann::json& j, absl::string_view path) : j_(j), path_(path) {}

  // The value of `key` (nullptr when absent or null); marks it known.
  const nlohmann::json* Get(const std::string& key);
  // An integer in [lo, hi]; absent or null leaves *out (an error when required).
  absl::Status Int(const std::string& key, bool required, int64_t lo, int64_t hi, int* out);
  // A finite number > 0; absent or null leaves *out.
  absl::Status Positive(const std::string& key, double* out);
  absl::Status Bool(const std::string& key, bool* out);
  // A boolean that must be `want` when present ("... = false is not supported" otherwise).
  absl::Status RequireBool(const std::string& key, bool want);
  // A token id or a list of them, each in [0, vocab); absent or null leaves *out.
  absl::Status TokenIds(const std::string& key, int vocab, std::vector<int32_t>* out);
  // Keys that are read elsewhere or do not change the math (architectures, transformers_version,
  // initializer_range, ...).
  void Known(std::initializer_list<const char*> keys);

  absl::Status Bad(const std::string& key, absl::string_view why) const;
  // Keys present and never read, sorted.
  std::vector<std::string> Unread() const;

 private:
  const nlohmann::json& j_;
  std::string path_;
  std::set<std::string> read_;
};

// config.json as Python's json.dumps writes it (what transformers saves), made standard JSON: the
// bare literals NaN, Infinity and -Infinity outside strings become the strings "NaN", "Infinity"
// and "-Infinity" (readers that accept them say so: Mamba-2's time_step_limit). Everything else
// is copied unchanged, so invalid JSON stays invalid.
std::string JsonFromPython(absl::string_view text);

// The keys every Hugging Face decoder family reads alike: vocab_size, hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads (required), num_key_value_heads
// (default: the heads; must divide them), rms_norm_eps and max_position_embeddings (absent: *c's
// values kept), bos_token_id and eos_token_id (an id or a list).
absl::Status ReadDecoderBasics(HfConfigReader& r, ModelConfig* c);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_HF_CONFIG_H_
