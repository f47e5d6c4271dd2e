// Fuzzes incremental detokenization: whatever the token stream, every emitted piece is valid
// UTF-8 and the pieces concatenate to a valid string.
#include <cstdint>
#include <string>

#include "engine/tokenizer/byte_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  flatstate::IncrementalDecoder dec;
  std::string all;
  for (size_t i = 0; i < size; ++i) {
    // Map some bytes outside [0, 256) to exercise invalid ids.
    const int32_t tok = data[i] == 0xFF && i + 1 < size ? 256 + data[++i] : data[i];
    const std::string piece = dec.Push(tok);
    if (!flatstate::IsValidUtf8(piece)) __builtin_trap();
    all += piece;
  }
  all += dec.Flush();
  if (!flatstate::IsValidUtf8(all)) __builtin_trap();
  return 0;
}
