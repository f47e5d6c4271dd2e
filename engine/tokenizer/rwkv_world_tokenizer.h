// RwkvWorldTokenizer: the RWKV "World" vocabulary (rwkv_vocab_v20230424.txt) as a Tokenizer.
// Each line of the file is `<id> <Python str or bytes literal> <byte length>`, e.g.
// `33 '!' 1`, `16998 b'\xe6\x98' 2`; str literals stand for their UTF-8 bytes. Encoding is the
// reference TRIE_TOKENIZER's greedy longest match over bytes; id 0 is <|endoftext|> (not in the
// file). Ids are below 65536; vocab_size() is the file's largest id + 1 (65530 for the published
// file, whose models have 65536 embedding rows). Special-token text is never parsed.
//
// Decoder state: the bytes of an incomplete UTF-8 character held back (0-3 bytes), exactly as
// ByteTokenizer's; any other state decodes as well as it can.
//
// Owns the token bytes and a byte trie; immutable after Load, thread-safe. Load fails with
// InvalidArgument naming the file and line ("rwkv_vocab.txt:17: ...": bad literal, length
// mismatch, repeated id, id outside [1, 65536)); Encode never fails (every byte is a token in
// a real vocabulary; a byte missing from a partial one is an InvalidArgument naming it).
#ifndef FLATSTATE_ENGINE_TOKENIZER_RWKV_WORLD_TOKENIZER_H_
#define FLATSTATE_ENGINE_TOKENIZER_RWKV_WORLD_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace flatstate {

// Decodes one Python str or bytes literal (the whole of `lit`) to bytes (str: UTF-8).
absl::StatusOr<std::string> ParsePythonLiteral(std::string_view lit);

class RwkvWorldTokenizer final : public Tokenizer {
 public:
  static constexpr int kVocabSize = 65536;
  static absl::StatusOr<std::unique_ptr<RwkvWorldTokenizer>> Load(const std::string& path);
  // From the file's text; `file` names it in errors.
  static absl::StatusOr<std::unique_ptr<RwkvWorldTokenizer>> Parse(std::string_view text,
                                                                   const std::string& file);

  std::string_view kind() const override { return "rwkv-world"; }
  int vocab_size() const override { return max_id_ + 1; }
  int32_t bos_id() const override { return -1; }
  const std::vector<int32_t>& eos_ids() const override { return eos_ids_; }
  bool has_text() const override { return true; }
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const override;
  std::string TokenBytes(int32_t id) const override;
  std::string DecodeNext(int32_t id, std::string* state) const override;
  std::string DecodeFlush(std::string* state) const override;

 private:
  RwkvWorldTokenizer() = default;
  std::vector<std::string> tokens_;  // by id; "" for none
  // Trie edges: (node << 8 | byte) -> child; node 0 is the root. token_at_[node]: id or -1.
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  std::vector<int32_t> token_at_;
  std::vector<int32_t> eos_ids_ = {0};
  int32_t max_id_ = 0;
};

}  // namespace flatstate

#endif  // FLATSTATE_ENGINE_TOKENIZER_RWKV_WORLD_TOKENIZER_H_
