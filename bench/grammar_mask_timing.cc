// Token mask time per decoding step for a JSON-schema grammar at a real vocabulary
// (docs/grammar.md, "Mask time"). Loads a Hugging Face tokenizer.json's vocabulary (byte-level BPE
// strings decoded to bytes through GPT-2's byte-to-unicode table), converts a JSON schema to a
// grammar, generates documents from it, and replays each document as a constrained generation:
// at every step the mask is computed, and the longest allowed token that the document continues
// with is taken. Prints the time per step of the trie walk alone (no cache), and with the masker's
// state cache over all documents (the first occurrence of each state pays the walk), on 1 thread,
// as thread CPU time (steadier than wall time on a shared machine).
//   [KEY_FRAMES=k] flatstate-grammar-mask-timing <tokenizer.json> [documents, default 20]
//       [schema.json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/grammar/compiled_grammar.h"
#include "engine/grammar/grammar_state.h"
#include "engine/grammar/json_schema.h"
#include "engine/grammar/token_masker.h"
#include "engine/grammar/vocab_trie.h"
#include "nlohmann/json.hpp"
#include "tests/engine/grammar/grammar_walk.h"

namespace fg = flatstate::grammar;

namespace {

constexpr char kDefaultSchema[] = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 60},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "format": "email"},
    "born": {"type": "string", "format": "date"},
    "score": {"type": "number"},
    "active": {"type": "boolean"},
    "role": {"enum": ["admin", "editor", "viewer"]},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 6},
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["street", "city"], "additionalProperties": false},
    "notes": {"anyOf": [{"type": "string"}, {"type": "null"}]}
  },
  "required": ["name", "age", "email", "role", "tags", "address"],
  "additionalProperties": false
})";

double NowUs() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// This thread's CPU time: steadier than wall time on a shared machine.
double CpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

// GPT-2's byte-level alphabet: code point -> byte.
std::map<uint32_t, uint8_t> UnicodeToByte() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::map<uint32_t, uint8_t> out;
  for (int b : bs) out[static_cast<uint32_t>(b)] = static_cast<uint8_t>(b);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) out[256 + n++] = static_cast<uint8_t>(b);
  }
  return out;
}

std::string DecodeByteLevel(const std::string& s, const std::map<uint32_t, uint8_t>& table) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    auto it = table.find(cp);
    if (it != table.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out += s.substr(i, len);
    }
    i += len;
  }
  return out;
}

struct Stats {
  std::vector<double> us;
  void Print(const char* what) {
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double v : us) sum += v;
    if (us.empty()) return;
    std::printf("%-28s steps %6zu  mean %9.1f us  median %9.1f us  p90 %9.1f us  max %9.1f us\n",
                what, us.size(), sum / us.size(), us[us.size() / 2], us[us.size() * 9 / 10],
                us.back());
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <tokenizer.json> [documents] [schema.json]\n", argv[0]);
    return 2;
  }
  const int documents = argc > 2 ? std::atoi(argv[2]) : 20;
  std::string schema_text = kDefaultSchema;
  if (argc > 3) {
    std::ifstream f(argv[3]);
    std::stringstream ss;
    ss << f.rdbuf();
    schema_text = ss.str();
  }
  std::ifstream f(argv[1]);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  const nlohmann::json tok = nlohmann::json::parse(f);
  const auto table = UnicodeToByte();
  std::vector<std::string> vocab;
  std::vector<int32_t> special, eos;
  for (const auto& [text, id] : tok["model"]["vocab"].items()) {
    const size_t i = id.get<size_t>();
    if (vocab.size() <= i) vocab.resize(i + 1);
    vocab[i] = DecodeByteLevel(text, table);
  }
  for (const auto& added : tok["added_tokens"]) {
    const size_t i = added["id"].get<size_t>();
    if (vocab.size() <= i) vocab.resize(i + 1);
    vocab[i] = added["content"].get<std::string>();
    special.push_back(static_cast<int32_t>(i));
    const std::string c = vocab[i];
    if (c == "<|im_end|>" || c == "<|endoftext|>" || c == "<|eot_id|>") {
      eos.push_back(static_cast<int32_t>(i));
    }
  }
  double t0 = NowUs();
  auto trie = fg::VocabularyTrie::Build(vocab, special);
  if (!trie.ok()) return 1;
  std::printf("vocabulary %zu tokens, trie %zu nodes, built in %.1f ms\n", vocab.size(),
              (*trie)->num_nodes(), (NowUs() - t0) / 1000);
  t0 = NowUs();
  auto gbnf = fg::JsonSchemaTextToGbnf(schema_text);
  if (!gbnf.ok()) {
    std::fprintf(stderr, "%s\n", std::string(gbnf.status().message()).c_str());
    return 1;
  }
  auto grammar = fg::CompiledGrammar::FromGbnf(*gbnf);
  if (!grammar.ok()) {
    std::fprintf(stderr, "%s\n", std::string(grammar.status().message()).c_str());
    return 1;
  }
  std::printf("schema -> GBNF (%zu bytes) -> compiled (%zu elements) in %.2f ms\n", gbnf->size(),
              (*grammar)->num_elements(), (NowUs() - t0) / 1000);
  fg::testing::GrammarWalk walk(**grammar, 42);
  std::vector<std::string> docs;
  size_t bytes = 0;
  for (int d = 0; d < documents; ++d) {
    docs.push_back(walk.Generate(300));
    bytes += docs.back().size();
  }
  std::printf("%d documents, %zu bytes (e.g. %s)\n", documents, bytes, docs[0].c_str());

  // Pass 0: the reference walk of the whole trie each step. Pass 1: ComputeMask with only the
  // per-key cache (the first document pays the key walks). Pass 2: ComputeMask as the server
  // runs it (per-key and whole-state caches), fresh caches.
  fg::TokenMaskerOptions keys_only, both;
  keys_only.cache_states = false;
  if (const char* k = std::getenv("KEY_FRAMES")) {  // experiments with the cut
    keys_only.key_frames = both.key_frames = static_cast<uint32_t>(std::atoi(k));
  }
  fg::TokenMasker walker(*grammar, *trie), masker1(*grammar, *trie, keys_only),
      masker2(*grammar, *trie, both);
  std::map<std::string, int32_t> index;
  for (size_t id = 0; id < vocab.size(); ++id) {
    if (!vocab[id].empty()) index.emplace(vocab[id], static_cast<int32_t>(id));
  }
  Stats walk_stats, first1, rest1, warm1, first2, rest2, warm2;
  size_t allowed_sum = 0;
  for (int pass = 0; pass < 3; ++pass) {
    // The reference walk is slow: 3 documents of it are enough.
    const size_t n = pass == 0 ? std::min<size_t>(3, docs.size()) : docs.size();
    for (size_t d = 0; d < n; ++d) {
      const std::string& doc = docs[d];
      auto state = fg::GrammarState::Start(*grammar);
      size_t pos = 0;
      fg::TokenMask mask;
      // Documents: the first, the rest of the first half, the second half (keys mostly known).
      const bool warm = d >= docs.size() / 2;
      Stats& stats = pass == 0   ? walk_stats
                     : pass == 1 ? (d == 0 ? first1
                                    : warm ? warm1
                                           : rest1)
                                 : (d == 0 ? first2
                                    : warm ? warm2
                                           : rest2);
      while (true) {
        const double start = CpuUs();
        const absl::Status s = pass == 0   ? walker.ComputeMaskUncached(*state, eos, &mask)
                               : pass == 1 ? masker1.ComputeMask(*state, eos, &mask)
                                           : masker2.ComputeMask(*state, eos, &mask);
        const double took = CpuUs() - start;
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
          return 1;
        }
        stats.us.push_back(took);
        if (pass == 0) allowed_sum += mask.CountAllowed();
        if (pos == doc.size()) break;
        // The longest allowed token the document continues with (untimed).
        int32_t best = -1;
        size_t best_len = 0;
        for (size_t len = std::min<size_t>(doc.size() - pos, (*trie)->max_depth()); len > 0;
             --len) {
          auto it = index.find(doc.substr(pos, len));
          if (it != index.end() && mask.allowed(it->second)) {
            best = it->second;
            best_len = len;
            break;
          }
        }
        if (best < 0 || !state->Advance(doc.substr(pos, best_len)).ok()) {
          std::fprintf(stderr, "replay failed at byte %zu of %s\n", pos, doc.c_str());
          return 1;
        }
        pos += best_len;
      }
    }
  }
  auto all = [](const Stats& a, const Stats& b, const Stats& c) {
    Stats out;
    for (const Stats* s : {&a, &b, &c}) out.us.insert(out.us.end(), s->us.begin(), s->us.end());
    return out;
  };
  Stats all1 = all(first1, rest1, warm1), all2 = all(first2, rest2, warm2);
  walk_stats.Print("full trie walk, 3 docs");
  first1.Print("key cache, 1st doc (cold)");
  rest1.Print("key cache, rest of 1st half");
  warm1.Print("key cache, 2nd half");
  first2.Print("key+state cache, 1st doc");
  rest2.Print("key+state, rest of 1st half");
  warm2.Print("key+state cache, 2nd half");
  all1.Print("key cache, all docs");
  all2.Print("key+state cache, all docs");
  std::printf(
      "allowed tokens per step: mean %.0f; keys walked %zu; state cache hits %zu, misses %zu\n",
      static_cast<double>(allowed_sum) / walk_stats.us.size(), masker1.keys_built(),
      masker2.cache_hits(), masker2.cache_misses());
  return 0;
}
