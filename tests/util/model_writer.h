// Test helpers that write model folders and safetensors files (namespace flatstate::testing).
//
// For tests only: functions report I/O failures with GoogleTest ADD_FAILURE (and, where a
// StatusOr is returned, an error status) rather than crashing. Stateless and thread-safe apart
// from the files they write. Everything is deterministic given the seed.
#ifndef FLATSTATE_TESTS_UTIL_MODEL_WRITER_H_
#define FLATSTATE_TESTS_UTIL_MODEL_WRITER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"

namespace flatstate::testing {

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;  // row-major, product(shape) values
  bool bf16 = false;        // written as BF16: Bf16Bits of each value
  // kInt8 / kInt4: a matrix [n, k] written in the stored quantised layout, as the two tensors
  // ExpandQuantized makes of it (`data` holds the fp32 values it quantises).
  TorchDtype quantized = TorchDtype::kFloat32;
  // Non-empty: written as this safetensors dtype with `raw` as its bytes (`data` unused), after
  // every tensor that has none, so the 4-byte tensors before stay aligned.
  std::string raw_dtype{};
  std::string raw{};
};

// The nearest-even bf16 of f as its 16 bits (NaN stays a quiet NaN), and back (exact). Written
// here independently of kernels/gemm.h's Bf16FromFloat, which the tests compare with it.
uint16_t Bf16Bits(float f);
float FromBf16Bits(uint16_t b);

// The stored int8 / int4 rule of docs/model-format.md for one block of `len` (<= 32) values, to
// [-qmax, qmax] (127 or 7): scale = max|x| / qmax in fp32, q = nearest-even(x / scale) (all 0 and
// scale 0 for an all-zero block). Written here independently of kernels/gemm.h's
// QuantizeBlockInt8, which the tests compare with it; finite inputs only.
float QuantizeBlockRef(const float* x, int64_t len, float qmax, int8_t* q);

// `tensors` as a file stores them: each NamedTensor::quantized one [n, k] becomes its quants
// (int8: raw I8 [n, k]; int4: raw U8 [n, ceil(k / 2)], q[2i] + 8 in the low and q[2i + 1] + 8
// in the high nibble of byte i, an odd k's last high nibble 8) and its scales "<name>_scale" F32
// [n, ceil(k / 32)], per row and block of 32 (QuantizeBlockRef). Others are copied as they are.
std::vector<NamedTensor> ExpandQuantized(const std::vector<NamedTensor>& tensors);
// float(q) * scale of each weight of a quantized NamedTensor (the values it stands for).
std::vector<float> DequantizedValues(const NamedTensor& t);

// The bytes of a valid safetensors file holding ExpandQuantized(tensors) in order (F32, or BF16
// where NamedTensor::bf16 is set; raw ones last), the JSON header padded with spaces to a
// multiple of 8 bytes (so every tensor starts 8-byte aligned when all byte sizes are multiples
// of 8).
std::string SerializeSafetensors(const std::vector<NamedTensor>& tensors);
// Raw file: 8-byte little-endian `header_json.size()` + header + data, no padding or checks;
// for writing malformed files.
std::string RawSafetensors(std::string_view header_json, std::string_view data);
// Writes SerializeSafetensors(tensors) to `path`; returns `path`.
std::string WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors);

// Every tensor of the format's table (engine/arch/flatstate_tensors.h) for `cfg`, in file order,
// filled with deterministic pseudo-random values: matrices ~ N(0, scale^2); norm weights 1; conv
// kernel last tap 1 and the others ~ N(0, (scale/10)^2) plus the same small noise on the last
// tap; decay_logit 0.5 + small noise; feature_proj ~ N(0, 1); gated: feature_log_scale
// ~ N(0, 0.01), gate rows ~ N(0, scale^2), gate bias ~ N(1, 0.25). With cfg.torch_dtype bfloat16
// the layers' GEMM weights (the table's gemm rows: attn.wqkv, attn.wo, mlp.w1, mlp.w2) are marked
// bf16 and hold the widened nearest-even bf16 of the values the float32 config gets from the same
// seed (every other tensor is equal); with int8 / int4 they hold the float32 config's values,
// marked `quantized` (so the file stores their quantisation).
std::vector<NamedTensor> RandomModelTensors(const ModelConfig& cfg, uint64_t seed,
                                            float scale = 0.05f);
// The shapes random-weight models use. Small: 2 layers, d_model 64, 4 heads of 16, MLP 128,
// chunk 16 (the engine and server tests). Gpt2Small: 12 layers, d_model 768, 12 heads of 64,
// MLP 3072, chunk 64 (the benchmarks). Both: token-shift conv of 4 taps where the kind has it;
// window 8 (Small) or 64, rfa_num_features 12 or 32, hybrid_layout alternate.
ModelConfig SmallConfig(AttentionKind kind);
ModelConfig Gpt2SmallConfig(AttentionKind kind);

// config.json text for `cfg` (the keys of tools/flatstate_ref/model.py ModelConfig.to_json).
std::string ConfigJson(const ModelConfig& cfg);
// Creates `dir` (and parents) and writes config.json + model.safetensors
// (RandomModelTensors(cfg, seed)). Returns `dir`.
absl::StatusOr<std::string> WriteRandomModel(const std::string& dir, const ModelConfig& cfg,
                                             uint64_t seed);

// A fresh, unique, empty directory under $TEST_TMPDIR (or /tmp). Not removed automatically.
std::string TempDir();
// Whole-file helpers; failures are reported with ADD_FAILURE.
bool WriteFile(const std::string& path, std::string_view bytes);
std::string ReadFile(const std::string& path);

}  // namespace flatstate::testing

#endif  // FLATSTATE_TESTS_UTIL_MODEL_WRITER_H_
