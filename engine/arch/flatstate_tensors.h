// The tensor table of flatstate's own model format (docs/model-format.md, "Tensors"): the rows
// model.safetensors holds for a ModelConfig, in order. The table is data,
// engine/arch/flatstate_tensors.json, embedded into the library at build time (CMake generates a
// header holding it as a raw string literal; nothing is read at run time) and read by
// tools/export.py too (tools/flatstate_tensors.py), so the loader (flatstate_arch.cc), the test
// model writer (tests/util/model_writer.h) and the exporter read one table.
//
// Owns nothing beyond the returned vectors. Thread-safe: the embedded table is parsed once
// (function-local static). The embedded data is part of the program: if it is malformed,
// FlatstateTensorTable prints why and aborts (tests/engine/arch/flatstate_tensor_table_test.cc
// catches that, and checks the table against the hand-written one it replaced).
// FlatstateTensorTableFromJson, for other text, returns InvalidArgument instead.
#ifndef FLATSTATE_ENGINE_ARCH_FLATSTATE_TENSORS_H_
#define FLATSTATE_ENGINE_ARCH_FLATSTATE_TENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/config.h"

namespace flatstate {

// One row of the table, before the stored layout of torch_dtype (BF16 bits, or the int8 / int4
// quants and their "_scale" tensor: engine/model/weights.h). `role` is the JSON's "role" (the
// ModelWeights field the loader binds it to); `gemm` is set exactly for the layers' GEMM weights
// (attn.wqkv, attn.wo, mlp.w1, mlp.w2), the ones stored as torch_dtype says.
struct FlatstateTensor {
  enum class Role {
    kEmbed,
    kAttnNorm,
    kConv,
    kWqkv,
    kWo,
    kDecayLogit,
    kFeatureProj,
    kFeatureLogScale,
    kGateWeight,
    kGateBias,
    kMlpNorm,
    kW1,
    kW2,
    kNorm,
    kLmHead
  };
  std::string name;
  std::vector<int64_t> shape;
  Role role;
  int layer = -1;  // -1: not a layer's
  bool gemm = false;
};

// The embedded table for `config`.
std::vector<FlatstateTensor> FlatstateTensorTable(const ModelConfig& config);

// The table that JSON text `json` (the layout of flatstate_tensors.json) gives for `config`;
// InvalidArgument naming the entry and key when the text is malformed.
absl::StatusOr<std::vector<FlatstateTensor>> FlatstateTensorTableFromJson(
    absl::string_view json, const ModelConfig& config);

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_ARCH_FLATSTATE_TENSORS_H_
