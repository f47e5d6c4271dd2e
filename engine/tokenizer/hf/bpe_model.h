// The BPE model of a Hugging Face tokenizer.json ("model": {"type": "BPE", ...}): vocab, ranked
// merges ("a b" strings or ["a", "b"] pairs), ignore_merges, byte_fallback (<0xNN> tokens),
// unk_token with fuse_unk, continuing_subword_prefix and end_of_word_suffix. dropout must be
// null (anything else, even 0, is refused).
//
// Owns the vocabulary, the merge table and a word cache. Thread-safe: the tables are immutable
// after FromJson; the cache is split into mutex-guarded shards and stops growing at a fixed
// number of entries. FromJson may resolve merges on a second thread. FromJson fails with
// InvalidArgument naming `where` and the JSON path (e.g. "tokenizer.json: model.merges[17]: token
// \"xy\" is not in model.vocab"); Tokenize never fails (a character with no token, no byte fallback
// and no unk_token is dropped, as upstream).
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_BPE_MODEL_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "engine/tokenizer/hf/json_reader.h"
#include "engine/tokenizer/hf/token_index.h"
#include "nlohmann/json.hpp"

namespace flatstate::hf {

class BpeModel {
 public:
  // `j` is the "model" object; its vocab and merges are taken from *parts where the reader
  // captured them (json_reader.h), else from `j`. *parts is consumed.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& j,
                                                            const std::string& where,
                                                            BpeParts* parts);
  // Appends the ids of one pre-tokenized piece to *ids.
  void Tokenize(std::string_view piece, std::vector<int32_t>* ids) const;

  // -1 when absent.
  int32_t TokenToId(std::string_view token) const;
  // nullptr when `id` has no token in the model vocabulary.
  const std::string* IdToToken(int32_t id) const;
  // One more than the largest id.
  int32_t id_end() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  static constexpr int kShards = 16;
  static constexpr size_t kCachePerShard = 10000 / kShards;
  static constexpr size_t kMaxCachedPiece = 256;
  struct Shard {
    std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map;
  };

  BpeModel() = default;
  void MergeWord(std::string_view piece, std::vector<int32_t>* ids) const;
  // Merges [lo, hi) of `parts` as (pair key, merged id) into resolved[lo, hi); the first bad
  // one's error starts with ".merges[i]".
  absl::Status ResolveMerges(const BpeParts& parts, size_t lo, size_t hi,
                             std::pair<uint64_t, int32_t>* resolved) const;
  // Merge i, whose halves hash to hashes[0..1]. *next_id: the id tried first for the merged
  // token; set to the merged id + 1.
  absl::Status ResolveMerge(const BpeParts& parts, size_t i, const uint64_t hashes[2],
                            std::string* joined, int32_t* next_id,
                            std::pair<uint64_t, int32_t>* out) const;

  TokenIndex vocab_;  // reads id_to_token_
  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> has_token_;
  PairIndex merges_;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> ids (-1 absent) when byte_fallback
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  int32_t unk_id_ = -1;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
  mutable std::array<Shard, kShards> cache_;
};

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_BPE_MODEL_H_
