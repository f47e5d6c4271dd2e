// Patterns the Hugging Face pipeline splits and replaces with: an Oniguruma regex (the engine the
// upstream Rust library uses, same default syntax, UTF-8), a literal string, or a character class,
// and the SplitDelimiterBehavior that turns a pattern's matches into pieces.
//
// A Pattern owns its compiled regex (freed with it); after construction it is immutable and
// FindMatches is thread-safe (Oniguruma searches do not modify regex_t). Compiling fails with
// InvalidArgument carrying Oniguruma's message; searching never fails (a search error ends the
// match list early).
#ifndef FLATSTATE_ENGINE_TOKENIZER_HF_PATTERN_H_
#define FLATSTATE_ENGINE_TOKENIZER_HF_PATTERN_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace flatstate::hf {

struct Span {
  size_t start, end;
  bool is_match;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class Pattern {
 public:
  static absl::StatusOr<std::unique_ptr<Pattern>> Regex(std::string_view regex);
  static std::unique_ptr<Pattern> Literal(std::string_view text);
  static std::unique_ptr<Pattern> CharClass(std::function<bool(char32_t)> pred);
  // {"String": "..."} or {"Regex": "..."}; errors name `where`.
  static absl::StatusOr<std::unique_ptr<Pattern>> FromJson(const nlohmann::json& j,
                                                           const std::string& where);
  ~Pattern();

  // Spans covering all of `text` in order, matches flagged (upstream Pattern::find_matches);
  // empty text gives one empty non-match. `invert` swaps match and non-match.
  void FindMatches(std::string_view text, bool invert, std::vector<Span>* out) const;
  // Just the (start, end) of each match, the Rust onig find_iter way (empty matches allowed).
  void FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

 private:
  Pattern() = default;
  void* regex_ = nullptr;  // regex_t*
  std::string literal_;
  std::function<bool(char32_t)> pred_;
};

// The pieces (start, end) of `text` that `behavior` keeps from `spans`; empty pieces dropped.
void ApplyBehavior(const std::vector<Span>& spans, SplitBehavior behavior,
                   std::vector<std::pair<size_t, size_t>>* pieces);
absl::StatusOr<SplitBehavior> ParseBehavior(const nlohmann::json& j, const std::string& where);

}  // namespace flatstate::hf

#endif  // FLATSTATE_ENGINE_TOKENIZER_HF_PATTERN_H_
