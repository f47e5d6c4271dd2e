#include "engine/tokenizer/hf/pattern.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf/text_util.h"
#include "oniguruma.h"

namespace flatstate::hf {
namespace {

void InitOnig() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding enc[] = {ONIG_ENCODING_UTF8};
    onig_initialize(enc, 1);
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<Pattern>> Pattern::Regex(std::string_view regex) {
  InitOnig();
  std::unique_ptr<Pattern> p(new Pattern());
  regex_t* re = nullptr;
  OnigErrorInfo info;
  const auto* b = reinterpret_cast<const OnigUChar*>(regex.data());
  const int r = onig_new(&re, b, b + regex.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                         ONIG_SYNTAX_DEFAULT, &info);
  if (r != ONIG_NORMAL) {
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &info);
    return absl::InvalidArgumentError(
        absl::StrCat("bad regex: ", reinterpret_cast<const char*>(msg)));
  }
  p->regex_ = re;
  return p;
}

std::unique_ptr<Pattern> Pattern::Literal(std::string_view text) {
  std::unique_ptr<Pattern> p(new Pattern());
  p->literal_ = std::string(text);
  return p;
}

std::unique_ptr<Pattern> Pattern::CharClass(std::function<bool(char32_t)> pred) {
  std::unique_ptr<Pattern> p(new Pattern());
  p->pred_ = std::move(pred);
  return p;
}

absl::StatusOr<std::unique_ptr<Pattern>> Pattern::FromJson(const nlohmann::json& j,
                                                           const std::string& where) {
  if (j.is_object() && j.size() == 1) {
    if (auto it = j.find("String"); it != j.end() && it->is_string()) {
      return Literal(it->get<std::string>());
    }
    if (auto it = j.find("Regex"); it != j.end() && it->is_string()) {
      auto p = Regex(it->get<std::string>());
      if (!p.ok())
        return absl::InvalidArgumentError(absl::StrCat(where, ".Regex: ", p.status().message()));
      return p;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": expected {\"String\": ...} or {\"Regex\": ...}"));
}

Pattern::~Pattern() {
  if (regex_ != nullptr) onig_free(static_cast<regex_t*>(regex_));
}

void Pattern::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  out->clear();
  if (regex_ != nullptr) {
    regex_t* re = static_cast<regex_t*>(regex_);
    OnigRegion* region = onig_region_new();
    const auto* b = reinterpret_cast<const OnigUChar*>(text.data());
    const OnigUChar* e = b + text.size();
    size_t last_end = 0;
    bool have_last = false;
    size_t last_match_end = 0;
    while (last_end <= text.size()) {
      onig_region_clear(region);
      const int r = onig_search(re, b, e, b + last_end, e, region, ONIG_OPTION_NONE);
      if (r < 0) break;
      const size_t s = region->beg[0], t = region->end[0];
      if (s == t && have_last && last_match_end == t) {
        // No empty match right after the previous match: step one character.
        if (last_end >= text.size()) break;
        char32_t cp;
        last_end += DecodeUtf8(text, last_end, &cp);
        continue;
      }
      last_end = t;
      last_match_end = t;
      have_last = true;
      out->emplace_back(s, t);
    }
    onig_region_free(region, 1);
    return;
  }
  if (pred_) {
    for (size_t i = 0; i < text.size();) {
      char32_t cp;
      const size_t n = DecodeUtf8(text, i, &cp);
      if (pred_(cp)) out->emplace_back(i, i + n);
      i += n;
    }
    return;
  }
  if (literal_.empty()) return;
  for (size_t pos = text.find(literal_); pos != std::string_view::npos;
       pos = text.find(literal_, pos + literal_.size())) {
    out->emplace_back(pos, pos + literal_.size());
  }
}

void Pattern::FindMatches(std::string_view text, bool invert, std::vector<Span>* out) const {
  out->clear();
  if (text.empty()) {
    out->push_back({0, 0, invert});
    return;
  }
  std::vector<std::pair<size_t, size_t>> m;
  FindAll(text, &m);
  size_t prev = 0;
  for (const auto& [s, e] : m) {
    if (prev != s) out->push_back({prev, s, invert});
    out->push_back({s, e, !invert});
    prev = e;
  }
  if (prev != text.size()) out->push_back({prev, text.size(), invert});
}

void ApplyBehavior(const std::vector<Span>& spans, SplitBehavior behavior,
                   std::vector<std::pair<size_t, size_t>>* pieces) {
  std::vector<std::pair<size_t, size_t>> acc;
  bool prev_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) acc.emplace_back(s.start, s.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Span& s : spans) {
        if (!s.is_match) acc.emplace_back(s.start, s.end);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !prev_match && !acc.empty()) {
          acc.back().second = s.end;
        } else {
          acc.emplace_back(s.start, s.end);
        }
        prev_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !prev_match && !acc.empty()) {
          acc.back().first = it->start;
        } else {
          acc.emplace_back(it->start, it->end);
        }
        prev_match = it->is_match;
      }
      std::reverse(acc.begin(), acc.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == prev_match && !acc.empty()) {
          acc.back().second = s.end;
        } else {
          acc.emplace_back(s.start, s.end);
        }
        prev_match = s.is_match;
      }
      break;
  }
  pieces->clear();
  for (const auto& p : acc) {
    if (p.second > p.first) pieces->push_back(p);
  }
}

absl::StatusOr<SplitBehavior> ParseBehavior(const nlohmann::json& j, const std::string& where) {
  const std::string s = j.is_string() ? j.get<std::string>() : "";
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError(absl::StrCat(where, ": unknown split behavior ", j.dump()));
}

}  // namespace flatstate::hf
