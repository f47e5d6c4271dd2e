// A JSON reader for tokenizer.json, written for load time: the bulk of the file (model.vocab and
// model.merges, hundreds of thousands of entries) is read straight into flat vectors instead of
// an nlohmann DOM (whose objects are std::maps), everything else into nlohmann::json. Strict
// RFC 8259 (no comments, no trailing commas), strings must be valid UTF-8 with paired \u
// surrogates; nesting deeper than 256 levels is refused, and so is a text of 4 GiB or more.
//
// Stateless functions; thread-safe. Fails with InvalidArgument "<file>: not valid JSON at byte N:
// <reason>".
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_JSON_READER_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_JSON_READER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flatstate::hf {

// model.vocab and model.merges as read; `captured` false when they were absent or not an object /
// a list (then the DOM holds whatever was there). Token strings are kept in one arena.
struct BpeParts {
  bool vocab_captured = false;
  // One per vocab entry, in file order: the key as offset and length into `arena`, and its id.
  struct Token {
    uint32_t off, len;
    int32_t id;
  };
  std::vector<Token> vocab;
  // The first entry whose value is not an integer in [0, 2^24): its key and its value's JSON.
  bool vocab_bad = false;
  std::string bad_key, bad_value;
  bool merges_captured = false;
  // One per merge: its two halves as offsets into `arena`; a malformed entry has a_len ==
  // kBadMerge and `a` indexes bad_merges (its JSON text, for the error).
  static constexpr uint32_t kBadMerge = 0xFFFFFFFF;
  struct Merge {
    uint32_t a, a_len, b, b_len;
  };
  std::vector<Merge> merges;
  std::string arena;
  std::vector<std::string> bad_merges;

  // Appends one vocab entry whose value is an id in [0, 2^24).
  void AddToken(std::string_view key, int32_t id) {
    vocab.push_back({static_cast<uint32_t>(arena.size()), static_cast<uint32_t>(key.size()), id});
    arena.append(key.data(), key.size());
  }
  // Appends one vocab entry whose value is any JSON (recorded as the first bad one unless it is
  // an id in [0, 2^24)).
  void AddToken(std::string_view key, const nlohmann::json& value);
  std::string_view Str(uint32_t off, uint32_t len) const {
    return std::string_view(arena.data() + off, len);
  }
};

// The document without model.vocab / model.merges when they were captured into *parts.
absl::StatusOr<nlohmann::json> ReadTokenizerJson(std::string_view text, const std::string& file,
                                                 BpeParts* parts);

// An optional field of the object `j`: absent or null gives `dflt`; any other JSON type fails with
// InvalidArgument "<where>.<key>: expected a string" (a boolean). Never throws.
absl::StatusOr<std::string> OptionalString(const nlohmann::json& j, const char* key,
                                           std::string dflt, const std::string& where);
absl::StatusOr<bool> OptionalBool(const nlohmann::json& j, const char* key, bool dflt,
                                  const std::string& where);

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_JSON_READER_H_
