// The post-processor of a Hugging Face tokenizer.json ("post_processor" key) for one sequence:
// TemplateProcessing ("single": SpecialToken and Sequence pieces), BertProcessing and
// RobertaProcessing ([cls] A [sep]), ByteLevel (nothing to do on ids) and Sequence. It reduces to
// the ids added before and after the encoded text when add_special is set.
//
// A plain value, immutable after FromJson, thread-safe. FromJson fails with InvalidArgument
// naming `where` and the field (an unknown piece type, a SpecialToken missing from
// "special_tokens", ...).
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_POST_PROCESSOR_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_POST_PROCESSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flatstate::hf {

struct PostProcessor {
  std::vector<int32_t> prefix;  // ids before the text
  std::vector<int32_t> suffix;  // ids after the text
  bool adds_tokens = false;     // a template/Bert/Roberta processor is present

  static absl::StatusOr<PostProcessor> FromJson(const nlohmann::json& j, const std::string& where);
};

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_POST_PROCESSOR_H_
