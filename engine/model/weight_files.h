// The safetensors files of one model folder, single or sharded, as one name -> tensor lookup.
//
// A folder holds either model.safetensors, or model.safetensors.index.json (Hugging Face's
// sharded layout: {"metadata": {...}, "weight_map": {tensor name: shard file name}}) and the
// shards it names. With both, the single file wins (it is what flatstate's exporter writes).
//
// Owns every shard's read-only mapping (SafetensorsFile); the TensorViews it hands out point into
// them and stay valid for the WeightFiles' lifetime. Immutable after Open, so thread-safe for
// concurrent readers.
//
// Open never crashes on bad input; every error names the file (and the tensor where one is
// involved): NotFound when neither file exists or a shard the index names is absent (naming the
// index and the shard); InvalidArgument for an index that is not JSON, has no "weight_map"
// object, names a shard outside the folder ("/" or ".." in the name), or maps a tensor to a
// shard that does not hold it; InvalidArgument for a tensor held by two shards or by a shard
// the index does not list for it; the shards' own errors as SafetensorsFile::Open reports them.
#ifndef FLATSTATE_ENGINE_MODEL_WEIGHT_FILES_H_
#define FLATSTATE_ENGINE_MODEL_WEIGHT_FILES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/safetensors.h"

namespace flatstate {

inline constexpr char kSingleWeightsFile[] = "model.safetensors";
inline constexpr char kWeightsIndexFile[] = "model.safetensors.index.json";

// Parses model.safetensors.index.json text (`path` for messages): shard file name -> the tensor
// names the index maps to it (each list in the index's order). The InvalidArgument cases of the
// index listed above; never reads a file.
absl::StatusOr<std::map<std::string, std::vector<std::string>>> ParseWeightIndex(
    absl::string_view text, absl::string_view path);

class WeightFiles {
 public:
  // `dir` with a trailing "/" (or empty for the current folder).
  static absl::StatusOr<std::unique_ptr<WeightFiles>> Open(const std::string& dir_prefix);

  // The tensor of that name and the path of the file holding it; nullptr when absent.
  struct Found {
    const TensorView* tensor = nullptr;
    const std::string* path = nullptr;
  };
  Found Find(std::string_view name) const;

  // Every tensor of every file, with its file's path, in file order then data order.
  std::vector<Found> All() const;
  // The files in the order their bytes enter the fingerprint (the index's sorted shard names).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // The index path when sharded, else the single file's path (for messages).
  const std::string& description() const { return description_; }
  bool sharded() const { return sharded_; }
  size_t total_bytes() const;

 private:
  WeightFiles() = default;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t, std::less<>> where_;  // tensor name -> index into files_
  std::string description_;
  bool sharded_ = false;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_MODEL_WEIGHT_FILES_H_
