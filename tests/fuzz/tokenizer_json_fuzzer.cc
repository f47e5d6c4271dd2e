// Fuzzes the Hugging Face tokenizer.json loader and pipeline (engine/tokenizer/hf): the input is
// a tokenizer.json, then the separator "\n@@\n", then text. Loading must fail cleanly or give a
// tokenizer whose Encode (both special-token modes, with and without add_special) returns ids in
// the vocabulary, whose streamed decode emits valid UTF-8 with a state of at most
// kMaxDecoderStateBytes, and whose whole decode is valid UTF-8. Sizes are bounded (64 KiB JSON,
// 2 KiB text) so one input stays fast.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/byte_tokenizer.h"
#include "engine/tokenizer/hf/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t sep = in.find("\n@@\n");
  const std::string_view json = in.substr(0, sep);
  const std::string_view text = sep == std::string_view::npos ? "" : in.substr(sep + 4);
  if (json.size() > (64 << 10) || text.size() > (2 << 10)) return 0;
  auto tok = flatstate::HfTokenizer::FromJson(json, "tokenizer.json");
  if (!tok.ok()) return 0;
  const flatstate::HfTokenizer& t = **tok;
  for (int mode = 0; mode < 4; ++mode) {
    auto ids = t.EncodeWithOptions(
        text, {.add_special = (mode & 1) != 0, .parse_special = (mode & 2) != 0});
    if (!ids.ok()) __builtin_trap();
    for (int32_t id : *ids) {
      if (id < 0 || id >= t.vocab_size()) __builtin_trap();
    }
    std::string state, all;
    for (int32_t id : *ids) {
      const std::string piece = t.DecodeNext(id, &state);
      if (!flatstate::IsValidUtf8(piece)) __builtin_trap();
      if (state.size() > flatstate::kMaxDecoderStateBytes) __builtin_trap();
      all += piece;
    }
    all += t.DecodeFlush(&state);
    if (!flatstate::IsValidUtf8(all)) __builtin_trap();
    if (!flatstate::IsValidUtf8(t.DecodeFull(*ids, mode == 0))) __builtin_trap();
  }
  // Arbitrary ids, including ones outside the vocabulary.
  std::string state;
  for (size_t i = 0; i + 1 < text.size(); i += 2) {
    const int32_t id = static_cast<uint8_t>(text[i]) * 256 + static_cast<uint8_t>(text[i + 1]);
    if (!flatstate::IsValidUtf8(t.DecodeNext(id - 1024, &state))) __builtin_trap();
  }
  t.DecodeFlush(&state);
  return 0;
}
