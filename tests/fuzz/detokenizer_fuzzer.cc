// Fuzzes incremental detokenization through the Tokenizer interface (ByteTokenizer): whatever
// the token stream, every emitted piece is valid UTF-8, the pieces concatenate to a valid string
// equal to the whole-sequence Decode and to the old IncrementalDecoder's output, and the decoder
// state (all a checkpoint keeps of it) never exceeds kMaxDecoderStateBytes.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/byte_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const flatstate::ByteTokenizer tok;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < size; ++i) {
    // Map some bytes outside [0, 256) to exercise invalid ids.
    ids.push_back(data[i] == 0xFF && i + 1 < size ? 256 + data[++i] : data[i]);
  }
  std::string state, all;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = tok.DecodeNext(ids[i], &state);
    if (!flatstate::IsValidUtf8(piece)) __builtin_trap();
    if (state.size() > flatstate::kMaxDecoderStateBytes) __builtin_trap();
    all += piece;
  }
  all += tok.DecodeFlush(&state);
  if (!flatstate::IsValidUtf8(all)) __builtin_trap();
  if (all != tok.Decode(ids)) __builtin_trap();
  // The same through the old IncrementalDecoder: the interface changed nothing.
  flatstate::IncrementalDecoder dec;
  std::string old;
  for (int32_t id : ids) old += dec.Push(id);
  old += dec.Flush();
  if (old != all) __builtin_trap();
  return 0;
}
