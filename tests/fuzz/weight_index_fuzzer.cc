// Fuzzes model.safetensors.index.json parsing (engine/model/weight_files.h, ParseWeightIndex): any
// text gives a shard map whose every file name stays inside the model folder, or an error.
#include <cstdint>
#include "absl/strings/string_view.h"

#include "engine/model/weight_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto map = flatstate::ParseWeightIndex(text, "fuzz/model.safetensors.index.json");
  if (!map.ok()) return 0;
  if (map->empty()) __builtin_trap();
  for (const auto& [file, names] : *map) {
    if (file.empty() || file == "." || file == ".." || file.find('/') != file.npos) {
      __builtin_trap();
    }
    if (names.empty()) __builtin_trap();
  }
  return 0;
}
