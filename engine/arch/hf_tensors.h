// Binding a Hugging Face checkpoint's tensors by a family's tensor table (Architecture::
// BindWeights of every HF entry): names, shapes, the load-time fusions, dtype conversion.
//
// Rules: every tensor may be F32, BF16 or F16. A table entry with several sources is their rows
// concatenated in order (q|k|v into one GEMM weight, gate|up into SwiGLU's w1, their biases). The
// layers' GEMM weights stay BF16 when every one of them is BF16 in the files (ModelConfig::
// torch_dtype becomes kBfloat16, so --weight_dtype auto runs them as bf16), else all are F32
// (F16 and BF16 widened exactly); every other tensor is F32 (widened where stored narrower). A
// single source already in the target type is used in place from the mapping; conversions and
// fusions are kept in the TensorStore. Norm weights must be finite (and get 1 + w when
// ModelConfig::norm_unit_offset). A file tensor that no entry names is an error, except those
// whose name ends in one of `ignored_suffixes` (e.g. "rotary_emb.inv_freq", recomputed) or starts
// with one of `ignored_prefixes` (e.g. a multimodal checkpoint's vision tower). A source may take
// only some of its rows, in a given order (HfTensor::rows): how a table de-interleaves a
// projection whose heads hold two parts (Qwen3.5's q_proj: each head's query, then its gate).
//
// Stateless; errors are InvalidArgument naming the file and the tensor.
#ifndef FLATSTATE_ENGINE_ARCH_HF_TENSORS_H_
#define FLATSTATE_ENGINE_ARCH_HF_TENSORS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "engine/model/config.h"
#include "engine/model/weight_files.h"
#include "engine/model/weights.h"

namespace flatstate {

struct HfTensor {
  enum class Kind { kVector, kNorm, kMatrix, kGemm };
  Kind kind = Kind::kVector;
  std::vector<std::string> names;            // sources, rows concatenated in this order
  std::vector<std::vector<int64_t>> shapes;  // each source's shape
  const float** f32 = nullptr;               // kVector, kNorm, kMatrix: the F32 result
  GemmTensor* gemm = nullptr;                // kGemm
  // Per source (empty, or an empty entry: every row): the rows taken, as (first, count) ranges
  // in order.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rows = {};
};

// `family` names the architecture in messages ("LlamaForCausalLM"); `extra_hint` is appended to
// an unexpected tensor's message (e.g. why lm_head.weight is unexpected).
absl::Status BindHfTensors(const std::vector<HfTensor>& table,
                           const std::vector<std::string>& ignored_suffixes,
                           absl::string_view family, const WeightFiles& files, ModelConfig* config,
                           TensorStore* store,
                           const std::vector<std::string>& ignored_prefixes = {});

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_HF_TENSORS_H_
