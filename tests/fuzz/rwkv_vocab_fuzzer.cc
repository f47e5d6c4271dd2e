// Fuzzes the RWKV World vocabulary file (engine/tokenizer/rwkv_world_tokenizer.h), which every
// RWKV-7 folder's rwkv_vocab_v20230424.txt goes through at load: any text gives a tokenizer or an
// error. For a tokenizer: vocab_size stays in (0, 65536], every id Encode returns for a piece of
// the input is in the vocabulary, and those ids' bytes concatenate back to that piece; incremental
// decoding keeps at most kMaxDecoderStateBytes of state.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/tokenizer/rwkv_world_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = flatstate::RwkvWorldTokenizer::Parse(text, "fuzz/rwkv_vocab.txt");
  if (!t.ok()) return 0;
  const int vocab = (*t)->vocab_size();
  if (vocab < 1 || vocab > flatstate::RwkvWorldTokenizer::kVocabSize) __builtin_trap();
  const std::string_view piece = text.substr(0, 64);
  auto ids = (*t)->Encode(piece, false);
  if (!ids.ok()) return 0;  // a byte the (partial) vocabulary lacks
  std::string back, state, decoded;
  for (int32_t id : *ids) {
    if (id < 1 || id >= vocab) __builtin_trap();
    back += (*t)->TokenBytes(id);
    decoded += (*t)->DecodeNext(id, &state);
    if (state.size() > flatstate::kMaxDecoderStateBytes) __builtin_trap();
  }
  if (back != piece) __builtin_trap();
  return 0;
}
