// Fuzzes the safetensors loader: any byte string is written to a file and opened; Open must return
// a status (never crash, leak or read out of bounds), and every tensor it accepts must lie inside
// the mapping.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/flatstate_fuzz_" + std::to_string(getpid()) +
                                  ".safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return 0;
  if (size > 0) std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto file = flatstate::SafetensorsFile::Open(path);
  if (file.ok()) {
    const uint8_t* begin = (*file)->file_data();
    const uint8_t* end = begin + (*file)->file_size();
    uint64_t sum = 0;
    for (const auto& t : (*file)->tensors()) {
      if (t.data < begin || t.data + t.size_bytes > end) __builtin_trap();
      if (t.size_bytes > 0) sum += t.data[0] + t.data[t.size_bytes - 1];
    }
    (void)sum;
  }
  return 0;
}
