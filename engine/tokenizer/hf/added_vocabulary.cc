#include "engine/tokenizer/hf/added_vocabulary.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf/json_reader.h"
#include "engine/tokenizer/hf/text_util.h"
#include "engine/util/status_macros.h"

namespace flatstate::hf {
namespace {

bool IsWordChar(char32_t c) { return c == '_' || IsAlphanumeric(c); }

// The last code point of text[0, end) (end > 0).
char32_t LastChar(std::string_view text, size_t end, size_t* start) {
  size_t s = end - 1;
  while (s > 0 && (static_cast<uint8_t>(text[s]) & 0xC0) == 0x80) --s;
  char32_t cp;
  DecodeUtf8(text, s, &cp);
  *start = s;
  return cp;
}

}  // namespace

void AddedVocabulary::Trie::Add(std::string_view key, int32_t token) {
  if (key.empty()) return;
  if (nodes.empty()) nodes.emplace_back();
  int32_t n = 0;
  for (char ch : key) {
    const uint8_t c = static_cast<uint8_t>(ch);
    auto& next = nodes[n].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t{-1}));
    if (it != next.end() && it->first == c) {
      n = it->second;
    } else {
      const int32_t child = static_cast<int32_t>(nodes.size());
      next.insert(it, {c, child});
      nodes.emplace_back();
      n = child;
    }
  }
  if (nodes[n].token < 0) nodes[n].token = token;
  first_byte[static_cast<uint8_t>(key[0])] = true;
}

int32_t AddedVocabulary::Trie::Longest(std::string_view text, size_t i, size_t* end) const {
  int32_t best = -1;
  int32_t n = 0;
  for (size_t k = i; k < text.size(); ++k) {
    const uint8_t c = static_cast<uint8_t>(text[k]);
    const auto& next = nodes[n].next;
    auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(c, int32_t{-1}));
    if (it == next.end() || it->first != c) break;
    n = it->second;
    if (nodes[n].token >= 0) best = nodes[n].token, *end = k + 1;
  }
  return best;
}

absl::StatusOr<std::unique_ptr<AddedVocabulary>> AddedVocabulary::FromJson(
    const nlohmann::json& j, const std::string& where, const Normalizer* normalizer) {
  std::unique_ptr<AddedVocabulary> v(new AddedVocabulary());
  if (j.is_null()) return v;
  if (!j.is_array()) return absl::InvalidArgumentError(absl::StrCat(where, ": not a list"));
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    const std::string at = absl::StrCat(where, "[", i, "]");
    if (!e.is_object()) return absl::InvalidArgumentError(absl::StrCat(at, ": not an object"));
    AddedToken t;
    auto id = e.find("id");
    if (id == e.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() >= (int64_t{1} << 24)) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".id: missing or not an id"));
    }
    t.id = id->get<int32_t>();
    auto content = e.find("content");
    if (content == e.end() || !content->is_string() || content->get<std::string>().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".content: missing, empty or not a string"));
    }
    t.content = content->get<std::string>();
    ASSIGN_OR_RETURN(t.special, OptionalBool(e, "special", false, at));
    ASSIGN_OR_RETURN(t.normalized, OptionalBool(e, "normalized", !t.special, at));
    ASSIGN_OR_RETURN(t.lstrip, OptionalBool(e, "lstrip", false, at));
    ASSIGN_OR_RETURN(t.rstrip, OptionalBool(e, "rstrip", false, at));
    ASSIGN_OR_RETURN(t.single_word, OptionalBool(e, "single_word", false, at));
    const int32_t index = static_cast<int32_t>(v->tokens_.size());
    v->by_id_.insert_or_assign(t.id, index);
    v->by_content_.insert_or_assign(t.content, index);
    if (t.normalized) {
      std::string key = t.content;
      if (normalizer != nullptr) normalizer->Normalize(&key);
      v->tries_[1].Add(key, index);
    } else {
      v->tries_[0].Add(t.content, index);
    }
    v->tokens_.push_back(std::move(t));
  }
  return v;
}

const AddedToken* AddedVocabulary::Find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::IdOf(std::string_view content) const {
  auto it = by_content_.find(absl::string_view(content.data(), content.size()));
  return it == by_content_.end() ? -1 : tokens_[it->second].id;
}

void AddedVocabulary::Split(std::string_view text, bool normalized_trie, bool parse_special,
                            std::vector<AddedSplit>* out) const {
  out->clear();
  const Trie& trie = tries_[normalized_trie ? 1 : 0];
  size_t start_offset = 0;
  if (!trie.nodes.empty()) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = 0;
      int32_t tok = -1;
      size_t start = pos;
      for (; start < text.size(); ++start) {
        if (!trie.first_byte[static_cast<uint8_t>(text[start])]) continue;
        tok = trie.Longest(text, start, &end);
        if (tok >= 0) break;
      }
      if (tok < 0) break;
      pos = end;
      const AddedToken& t = tokens_[tok];
      if (start < start_offset) continue;  // inside the previous token's rstrip
      if (t.special && !parse_special) continue;
      size_t stop = end;
      if (t.single_word) {
        size_t s;
        const bool start_space = start == 0 || !IsWordChar(LastChar(text, start, &s));
        char32_t next = 0;
        if (stop < text.size()) DecodeUtf8(text, stop, &next);
        const bool stop_space = stop == text.size() || !IsWordChar(next);
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t b = start;
        while (b > 0) {
          size_t s;
          if (!IsWhitespace(LastChar(text, b, &s))) break;
          b = s;
        }
        start = std::max(b, start_offset);
      }
      if (t.rstrip) {
        while (stop < text.size()) {
          char32_t cp;
          const size_t n = DecodeUtf8(text, stop, &cp);
          if (!IsWhitespace(cp)) break;
          stop += n;
        }
      }
      if (start_offset < start) out->push_back({-1, start_offset, start});
      out->push_back({t.id, start, stop});
      start_offset = stop;
    }
  }
  if (start_offset < text.size()) out->push_back({-1, start_offset, text.size()});
}

}  // namespace flatstate::hf
