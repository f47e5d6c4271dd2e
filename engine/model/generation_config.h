// generation_config.json, Hugging Face's generation defaults beside config.json: flatstate reads
// the two keys that change when generation ends and what starts a prompt. `eos_token_id` (an id
// or a list of ids) joins the config's end-of-sequence ids (no duplicates); `bos_token_id` fills
// a BOS id the config lacks. Every other key is ignored (sampling defaults come from requests).
//
// A pure function; thread-safe. Fails with InvalidArgument naming the file and the key: text
// that is not a JSON object, or an eos_token_id entry that is not an id in [0, vocab_size). On
// failure *config is unchanged.
#ifndef FLATSTATE_ENGINE_MODEL_GENERATION_CONFIG_H_
#define FLATSTATE_ENGINE_MODEL_GENERATION_CONFIG_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/model/config.h"

namespace flatstate {

absl::Status ApplyGenerationConfig(std::string_view text, absl::string_view path,
                                   ModelConfig* config);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_MODEL_GENERATION_CONFIG_H_
