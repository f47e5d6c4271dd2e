// Test helper: random strings a CompiledGrammar matches, made by walking its rules (random
// alternatives while the output is short, then the shortest ones so the walk ends). Not
// thread-safe; one per test.
#ifndef FLATSTATE_TESTS_ENGINE_GRAMMAR_GRAMMAR_WALK_H_
#define FLATSTATE_TESTS_ENGINE_GRAMMAR_GRAMMAR_WALK_H_

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/grammar/code_points.h"
#include "engine/grammar/compiled_grammar.h"

namespace flatstate::grammar::testing {

class GrammarWalk {
 public:
  GrammarWalk(const CompiledGrammar& g, uint64_t seed) : g_(g), rng_(seed) {
    // Shortest match per rule, in elements (a fixed point; unreachable stays "infinite").
    const uint64_t inf = std::numeric_limits<uint64_t>::max() / 4;
    min_.assign(g.num_rules(), inf);
    for (bool changed = true; changed;) {
      changed = false;
      for (uint32_t r = 0; r < g.num_rules(); ++r) {
        for (uint32_t alt : g.alternatives(r)) {
          const uint64_t len = AltMin(alt);
          if (len < min_[r]) {
            min_[r] = len;
            changed = true;
          }
        }
      }
    }
  }

  // A random match of the root rule; random choices stop once the output passes `soft_limit`.
  std::string Generate(size_t soft_limit) {
    soft_limit_ = soft_limit;
    std::string out;
    Rule(g_.root(), &out);
    return out;
  }

 private:
  uint64_t AltMin(uint32_t pos) const {
    uint64_t len = 0;
    for (; g_.element(pos).kind != ElementKind::kEnd; ++pos) {
      const Element& e = g_.element(pos);
      len += e.kind == ElementKind::kRule ? min_[e.arg] : 1;
    }
    return len;
  }

  void Rule(uint32_t r, std::string* out) {
    const auto& alts = g_.alternatives(r);
    uint32_t chosen = alts[0];
    if (out->size() < soft_limit_) {
      std::vector<uint32_t> finite;
      for (uint32_t a : alts) {
        if (AltMin(a) < std::numeric_limits<uint64_t>::max() / 8) finite.push_back(a);
      }
      chosen = finite[std::uniform_int_distribution<size_t>(0, finite.size() - 1)(rng_)];
    } else {
      uint64_t best = std::numeric_limits<uint64_t>::max();
      for (uint32_t a : alts) {
        if (AltMin(a) < best) best = AltMin(a), chosen = a;
      }
    }
    for (uint32_t pos = chosen; g_.element(pos).kind != ElementKind::kEnd; ++pos) {
      const Element& e = g_.element(pos);
      if (e.kind == ElementKind::kRule) {
        Rule(e.arg, out);
      } else if (e.kind == ElementKind::kByte) {
        std::vector<uint8_t> bytes;
        for (int b = 0; b < 256; ++b) {
          if (ByteSetHas(g_.byte_set(e.arg), static_cast<uint8_t>(b))) {
            bytes.push_back(static_cast<uint8_t>(b));
          }
        }
        out->push_back(static_cast<char>(
            bytes[std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng_)]));
      } else {
        const auto& ranges = g_.char_class(e.arg).ranges();
        const auto [lo, hi] =
            ranges[std::uniform_int_distribution<size_t>(0, ranges.size() - 1)(rng_)];
        AppendUtf8(std::uniform_int_distribution<uint32_t>(lo, hi)(rng_), out);
      }
    }
  }

  const CompiledGrammar& g_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> min_;
  size_t soft_limit_ = 0;
};

}  // namespace flatstate::grammar::testing

#endif  // FLATSTATE_TESTS_ENGINE_GRAMMAR_GRAMMAR_WALK_H_
