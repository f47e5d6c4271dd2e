// Read-only, memory-mapped safetensors file (https://github.com/huggingface/safetensors).
//
// Layout: u64 little-endian header length N, N bytes of JSON header, then the data section.
// The header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" string->string map.
//
// Ownership: a SafetensorsFile owns the read-only mapping of the whole file (munmap in the
// destructor). TensorView::data points into that mapping and is valid while the file lives.
// Thread safety: immutable after Open, so safe for concurrent readers.
//
// Failure: Open never crashes on bad input. Every error message starts with the file path and,
// when one is involved, names the tensor ("<path>: tensor '<name>': ...").
//   NotFound          the file does not exist.
//   DataLoss          content is missing: file shorter than 8 bytes, header length beyond the
//                     end of the file, or data_offsets beyond the data section ("out of range").
//   InvalidArgument   content is malformed: header over 100 MiB ("oversized header"), header not
//                     a JSON object, a malformed entry (dtype/shape/data_offsets), "unknown dtype"
//                     (not a safetensors dtype), end < begin, byte size != product(shape) *
//                     dtype size, two tensors' byte ranges overlapping ("overlaps tensor 'x'"),
//                     data not aligned to its element size in memory ("misaligned").
//   Internal / PermissionDenied  the OS refused to open, stat or map the file.
// Every known dtype (F16, BF16, F64, I32, ...) is accepted here; users reject the ones they
// cannot take (Model::Load: F32, and BF16, I8 or U8 for the layers' GEMM weights only:
// "unsupported dtype").
#ifndef FLATSTATE_ENGINE_MODEL_SAFETENSORS_H_
#define FLATSTATE_ENGINE_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace flatstate {

inline constexpr size_t kMaxSafetensorsHeaderBytes = size_t{100} << 20;  // 100 MiB

struct TensorView {
  std::string name;
  std::string dtype;  // as written in the header, e.g. "F32"
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping; aligned to the dtype's element size
  size_t size_bytes = 0;

  // Element count: product of shape (1 for a scalar).
  int64_t num_elements() const;
  // Typed access; only meaningful for dtype "F32".
  const float* f32() const { return reinterpret_cast<const float*>(data); }
  // Typed access; only meaningful for dtype "BF16" (each element an fp32's top 16 bits).
  const uint16_t* bf16() const { return reinterpret_cast<const uint16_t*>(data); }
  // "I8" and "U8" tensors are read as `data` (bytes).
};

// Size in bytes of one element of a safetensors dtype; 0 for an unknown name.
size_t SafetensorsDtypeSize(std::string_view dtype);
// True for the dtypes a model.safetensors may hold: "F32", and "BF16", "I8" (int8 quants) and
// "U8" (int4 quants, two per byte) only for the layers' GEMM weights (Model::Load checks which
// tensor has which, and that torch_dtype agrees).
inline bool IsSupportedWeightDtype(std::string_view dtype) {
  return dtype == "F32" || dtype == "BF16" || dtype == "I8" || dtype == "U8";
}

class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // nullptr when there is no tensor of that name.
  const TensorView* Find(std::string_view name) const;
  // All tensors, ordered by their position in the data section.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // The optional "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  const std::string& path() const { return path_; }
  const uint8_t* file_data() const { return data_; }
  size_t file_size() const { return size_; }
  // Bytes before the data section: 8 + header length.
  size_t data_section_offset() const { return data_offset_; }

 private:
  SafetensorsFile() = default;
  absl::Status Parse();

  std::string path_;
  const uint8_t* data_ = nullptr;  // mapping of the whole file, owned
  size_t size_ = 0;
  size_t data_offset_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_MODEL_SAFETENSORS_H_
