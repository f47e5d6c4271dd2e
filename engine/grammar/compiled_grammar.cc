#include "engine/grammar/compiled_grammar.h"

#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace flatstate::grammar {
namespace {

// Rules that can match the empty string.
std::vector<bool> NullableRules(const ParsedGrammar& g) {
  std::vector<bool> nullable(g.rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : g.rules[r].alternatives) {
        bool all = true;
        for (const Symbol& s : alt) {
          if (s.kind == Symbol::Kind::kChars || !nullable[s.rule]) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  return nullable;
}

// A rule on a cycle of "can start with" edges, or -1.
int LeftRecursiveRule(const ParsedGrammar& g) {
  const std::vector<bool> nullable = NullableRules(g);
  std::vector<std::vector<uint32_t>> starts(g.rules.size());
  for (size_t r = 0; r < g.rules.size(); ++r) {
    for (const auto& alt : g.rules[r].alternatives) {
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kChars) break;
        starts[r].push_back(s.rule);
        if (!nullable[s.rule]) break;
      }
    }
  }
  // Iterative depth-first search; color 1 = on the current path, 2 = done.
  std::vector<uint8_t> color(g.rules.size(), 0);
  for (size_t r0 = 0; r0 < g.rules.size(); ++r0) {
    if (color[r0] != 0) continue;
    std::vector<std::pair<uint32_t, size_t>> path = {{static_cast<uint32_t>(r0), 0}};
    color[r0] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next < starts[r].size()) {
        const uint32_t s = starts[r][next++];
        if (color[s] == 1) return static_cast<int>(s);
        if (color[s] == 0) {
          color[s] = 1;
          path.push_back({s, 0});
        }
      } else {
        color[r] = 2;
        path.pop_back();
      }
    }
  }
  return -1;
}

uint64_t Mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xFF;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::FromGbnf(
    std::string_view text) {
  absl::StatusOr<ParsedGrammar> parsed = ParseGbnf(text);
  if (!parsed.ok()) return parsed.status();
  return FromParsed(*parsed);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::FromParsed(
    const ParsedGrammar& parsed) {
  if (const int r = LeftRecursiveRule(parsed); r >= 0) {
    const ParsedRule& rule = parsed.rules[static_cast<size_t>(r)];
    std::string what = absl::StrCat("left recursion in rule '", rule.origin, "'");
    if (rule.origin != rule.name) absl::StrAppend(&what, " (through its part '", rule.name, "')");
    return absl::InvalidArgumentError(
        absl::StrCat("GBNF ", rule.line, ":", rule.column, ": ", what,
                     ": a rule may not reach itself before matching a character"));
  }
  std::shared_ptr<CompiledGrammar> g(new CompiledGrammar());
  std::map<ByteSet, uint32_t> byte_ids;
  std::map<std::vector<CodePointSet::Range>, uint32_t> class_ids;
  auto byte_set_id = [&](const ByteSet& set) {
    auto [it, inserted] = byte_ids.try_emplace(set, static_cast<uint32_t>(g->byte_sets_.size()));
    if (inserted) g->byte_sets_.push_back(set);
    return it->second;
  };
  g->rules_.resize(parsed.rules.size());
  for (size_t r = 0; r < parsed.rules.size(); ++r) {
    g->rules_[r].name = parsed.rules[r].name;
    for (const auto& alt : parsed.rules[r].alternatives) {
      g->rules_[r].alts.push_back(static_cast<uint32_t>(g->elements_.size()));
      for (const Symbol& s : alt) {
        if (s.kind == Symbol::Kind::kRule) {
          g->elements_.push_back({ElementKind::kRule, s.rule});
          continue;
        }
        const auto& ranges = s.chars.ranges();
        if (ranges.size() == 1 && ranges[0].first == ranges[0].second) {
          std::string bytes;
          AppendUtf8(ranges[0].first, &bytes);
          for (char c : bytes) {
            ByteSet set = {0, 0, 0, 0};
            const uint8_t b = static_cast<uint8_t>(c);
            set[b >> 6] |= uint64_t{1} << (b & 63);
            g->elements_.push_back({ElementKind::kByte, byte_set_id(set)});
          }
        } else if (s.chars.IsAscii()) {
          ByteSet set = {0, 0, 0, 0};
          for (auto [lo, hi] : ranges) {
            for (uint32_t b = lo; b <= hi; ++b) set[b >> 6] |= uint64_t{1} << (b & 63);
          }
          g->elements_.push_back({ElementKind::kByte, byte_set_id(set)});
        } else {
          auto [it, inserted] =
              class_ids.try_emplace(ranges, static_cast<uint32_t>(g->classes_.size()));
          if (inserted) {
            const CodePointSet non_ascii = CodePointSet::FromRanges({{0x80, kMaxCodePoint}});
            const CodePointSet both = CodePointSet::FromRanges([&] {
              auto r = s.chars.ranges();
              r.insert(r.end(), non_ascii.ranges().begin(), non_ascii.ranges().end());
              return r;
            }());
            Class c{s.chars, {}, both == s.chars};
            s.chars.LeadBytes(c.lead_bytes.data());
            g->classes_.push_back(std::move(c));
          }
          g->elements_.push_back({ElementKind::kClass, it->second});
        }
      }
      g->elements_.push_back({ElementKind::kEnd, static_cast<uint32_t>(r)});
      if (g->elements_.size() > kMaxElements) {
        return absl::InvalidArgumentError(absl::StrCat("grammar too large: over ", kMaxElements,
                                                       " elements (rule '", parsed.rules[r].origin,
                                                       "')"));
      }
    }
  }
  g->root_ = parsed.root;
  uint64_t h = 14695981039346656037ull;
  h = Mix(h, g->root_);
  for (const Rule& rule : g->rules_) {
    h = Mix(h, rule.alts.size());
    for (uint32_t a : rule.alts) h = Mix(h, a);
  }
  for (const Element& e : g->elements_) h = Mix(h, (uint64_t{e.arg} << 8) | uint8_t(e.kind));
  for (const ByteSet& s : g->byte_sets_) {
    for (uint64_t w : s) h = Mix(h, w);
  }
  for (const Class& c : g->classes_) {
    h = Mix(h, c.chars.ranges().size());
    for (auto [lo, hi] : c.chars.ranges()) h = Mix(h, (uint64_t{lo} << 32) | hi);
  }
  g->fingerprint_ = h;
  return std::shared_ptr<const CompiledGrammar>(std::move(g));
}

}  // namespace flatstate::grammar
