// Token mask time per decoding step for a JSON-schema grammar at a real vocabulary
// (docs/grammar.md, "Mask time"). Loads a Hugging Face tokenizer.json's vocabulary (byte-level BPE
// strings decoded to bytes through GPT-2's byte-to-unicode table), converts a JSON schema to a
// grammar, generates documents from it, and replays each document as a constrained generation:
// at every step the mask is computed, and the longest allowed token that the document continues
// with is taken. Prints the time per step of the trie walk alone (no cache), and with the masker's
// state cache over all documents (the first occurrence of each state pays the walk), on 1 thread,
// as thread CPU time (steadier than wall time on a shared machine).
//   [KEY_FRAMES=k] flatstate-grammar-mask-timing [--dump=DIR] <tokenizer.json>
//       [documents, default 20] [schema.json]
// --dump=DIR (for bench/compare_grammar_llamacpp.sh, which replays the same steps in llama.cpp's
// grammar sampler) also runs the full trie walk over every document, not 3, prints the time of
// GrammarState::Advance per step, and writes into DIR (which must exist):
//   grammar.gbnf         the GBNF the schema converts to, byte for byte
//   vocab.tsv            per token: id, its bytes in hex ("-" when empty), 1 if special
//   documents.jsonl      the generated documents, one JSON string per line
//   steps.tsv            per step: document, step, the token taken (-1 at the last step, after the
//                        whole document), the allowed non-special tokens (count and an FNV-1a hash
//                        of their ids), the same for those whose bytes are whole, valid UTF-8, and
//                        the step's CPU us for the full trie walk, ComputeMask with the key cache,
//                        with key and state caches, and Advance
// Without --dump the output is as before.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/grammar_bench_common.h"
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

using grammar_bench::IdSet;
using grammar_bench::ValidUtf8;

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
  std::string dump_dir;
  if (argc > 1 && std::strncmp(argv[1], "--dump=", 7) == 0) {
    dump_dir = argv[1] + 7;
    argv[1] = argv[0];
    --argc;
    ++argv;
  }
  const bool dump = !dump_dir.empty();
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s [--dump=DIR] <tokenizer.json> [documents] [schema.json]\n",
                 argv[0]);
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
  Stats walk_stats, first1, rest1, warm1, first2, rest2, warm2, advance;
  size_t allowed_sum = 0;
  // --dump: per step of each pass, its time; of pass 1, the token taken and the allowed set.
  std::vector<double> step_us[3], step_advance_us;
  std::vector<int32_t> step_doc, step_token;
  std::vector<IdSet> step_allowed, step_allowed_utf8;
  std::vector<bool> is_special(vocab.size(), false), is_utf8(vocab.size(), false);
  for (int32_t id : special) is_special[static_cast<size_t>(id)] = true;
  for (size_t id = 0; id < vocab.size(); ++id) is_utf8[id] = ValidUtf8(vocab[id]);
  for (int pass = 0; pass < 3; ++pass) {
    // The reference walk is slow: 3 documents of it are enough (all of them with --dump).
    const size_t n = pass == 0 && !dump ? std::min<size_t>(3, docs.size()) : docs.size();
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
        if (dump) step_us[pass].push_back(took);
        if (dump && pass == 1) {
          IdSet all_ids, utf8_ids;
          for (size_t id = 0; id < vocab.size(); ++id) {
            if (is_special[id] || !mask.allowed(static_cast<int32_t>(id))) continue;
            all_ids.Add(id);
            if (is_utf8[id]) utf8_ids.Add(id);
          }
          step_doc.push_back(static_cast<int32_t>(d));
          step_allowed.push_back(all_ids);
          step_allowed_utf8.push_back(utf8_ids);
          step_token.push_back(-1);  // these two set below when a token is taken
          step_advance_us.push_back(0);
        }
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
        const double advance_start = CpuUs();
        if (best < 0 || !state->Advance(doc.substr(pos, best_len)).ok()) {
          std::fprintf(stderr, "replay failed at byte %zu of %s\n", pos, doc.c_str());
          return 1;
        }
        if (dump && pass == 1) {
          step_advance_us.back() = CpuUs() - advance_start;
          advance.us.push_back(step_advance_us.back());
          step_token.back() = best;
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
  walk_stats.Print(dump ? "full trie walk, all docs" : "full trie walk, 3 docs");
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
  if (!dump) return 0;
  advance.Print("Advance (key cache pass)");
  auto hex = [](const std::string& bytes) {
    static const char kDigits[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : bytes) {
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
    return out.empty() ? std::string("-") : out;
  };
  std::ofstream(dump_dir + "/grammar.gbnf", std::ios::binary) << *gbnf;
  std::ofstream vocab_out(dump_dir + "/vocab.tsv");
  for (size_t id = 0; id < vocab.size(); ++id) {
    vocab_out << id << '\t' << hex(vocab[id]) << '\t' << (is_special[id] ? 1 : 0) << '\n';
  }
  std::ofstream docs_out(dump_dir + "/documents.jsonl", std::ios::binary);
  for (const std::string& doc : docs) docs_out << nlohmann::json(doc).dump() << '\n';
  std::ofstream steps_out(dump_dir + "/steps.tsv");
  steps_out << "doc\tstep\ttoken\tallowed\tallowed_fnv\tallowed_utf8\tallowed_utf8_fnv"
               "\tfull_walk_us\tkey_cache_us\tkey_state_cache_us\tadvance_us\n";
  char line[256];
  for (size_t i = 0, step = 0; i < step_doc.size(); ++i) {
    step = i > 0 && step_doc[i] == step_doc[i - 1] ? step + 1 : 0;
    std::snprintf(line, sizeof(line),
                  "%d\t%zu\t%d\t%zu\t%016llx\t%zu\t%016llx\t%.3f\t%.3f\t%.3f\t%.3f\n", step_doc[i],
                  step, step_token[i], step_allowed[i].count,
                  static_cast<unsigned long long>(step_allowed[i].hash), step_allowed_utf8[i].count,
                  static_cast<unsigned long long>(step_allowed_utf8[i].hash), step_us[0][i],
                  step_us[1][i], step_us[2][i], step_advance_us[i]);
    steps_out << line;
  }
  std::printf("wrote %s/{grammar.gbnf,vocab.tsv,documents.jsonl,steps.tsv}\n", dump_dir.c_str());
  return 0;
}
