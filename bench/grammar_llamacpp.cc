// llama.cpp's grammar sampler timed on the steps that flatstate's grammar mask bench replays
// (docs/benchmarks.md, "Grammar masks beside llama.cpp's grammar sampler"). Not part of
// flatstate's CMake build: bench/compare_grammar_llamacpp.sh compiles it with g++ against a
// llama.cpp checkout (a benchmark dependency only, never a build or CI one).
//
//   grammar_llamacpp <vocab.gguf> <dump dir> <out steps.tsv>
//
// <dump dir> is what `flatstate-grammar-mask-timing --dump=DIR` wrote: grammar.gbnf (the GBNF of
// flatstate's JSON-Schema converter), vocab.tsv (flatstate's token bytes, from tokenizer.json),
// documents.jsonl and steps.tsv (per step, the token flatstate took and its allowed set). The GGUF
// is loaded vocabulary-only. For each document, a fresh llama_sampler_init_grammar(vocab, gbnf,
// "root") and, at every step:
//   1. llama_sampler_apply on a llama_token_data_array holding the whole vocabulary (every id,
//      logit 0): the equivalent of computing flatstate's mask. Timed.
//   2. untimed checks: the allowed set (ids flatstate does not call special) against flatstate's
//      count and hash, strictly and over valid-UTF-8 tokens only (see below), and this side's own
//      choice (the longest allowed token whose piece the document continues with, the bench's
//      rule) against flatstate's token;
//   3. llama_sampler_apply on a 1-entry array holding the token taken: the check that llama.cpp's
//      sampling (common_sampler_sample) makes first, before it falls back to the whole vocabulary
//      when the model's token is rejected. Timed.
//   4. llama_sampler_accept of flatstate's token (the pieces were checked equal). Timed.
// The last step of a document (after its last byte) is 1. only, and checks that an
// end-of-generation token is allowed. Times are this thread's CPU time (CLOCK_THREAD_CPUTIME_ID),
// as flatstate's bench measures. Prints a summary; writes one line per step to <out steps.tsv>.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/grammar_bench_common.h"
#include "llama.h"
#include "nlohmann/json.hpp"

namespace {

double CpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

void QuietLog(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string FromHex(const std::string& hex) {
  if (hex == "-") return "";
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

using grammar_bench::IdSet;
using grammar_bench::ValidUtf8;

struct Stats {
  std::vector<double> us;
  void Print(const char* what) const {
    if (us.empty()) return;
    std::vector<double> v = us;
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    std::printf("%-34s steps %6zu  mean %9.1f us  median %9.1f us  p99 %9.1f us  max %9.1f us\n",
                what, v.size(), sum / v.size(), v[v.size() / 2], v[v.size() * 99 / 100], v.back());
  }
};

struct Step {
  int doc, step, token;
  IdSet allowed, allowed_utf8;  // flatstate's, of the ids not special in tokenizer.json
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <vocab.gguf> <dump dir> <out steps.tsv>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[2];
  llama_log_set(QuietLog, nullptr);
  llama_backend_init();
  llama_model_params mparams = llama_model_default_params();
  mparams.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mparams);
  if (model == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int32_t n_vocab = llama_vocab_n_tokens(vocab);

  // The pieces the grammar sees (llama_vocab::token_to_piece, rendered with special = true).
  std::vector<std::string> piece(static_cast<size_t>(n_vocab));
  std::vector<char> buf(256);
  size_t max_piece = 0;
  for (int32_t id = 0; id < n_vocab; ++id) {
    int32_t len =
        llama_token_to_piece(vocab, id, buf.data(), static_cast<int32_t>(buf.size()), 0, true);
    if (len < 0) {
      buf.resize(static_cast<size_t>(-len));
      len = llama_token_to_piece(vocab, id, buf.data(), static_cast<int32_t>(buf.size()), 0, true);
    }
    piece[static_cast<size_t>(id)].assign(buf.data(), static_cast<size_t>(std::max(len, 0)));
    max_piece = std::max(max_piece, piece[static_cast<size_t>(id)].size());
  }

  // flatstate's vocabulary (tokenizer.json) against the GGUF's.
  std::vector<std::string> flat;
  std::vector<bool> flat_special;
  {
    std::istringstream in(ReadFile(dir + "/vocab.tsv"));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      size_t id;
      std::string hex;
      int special;
      fields >> id >> hex >> special;
      if (flat.size() <= id) {
        flat.resize(id + 1);
        flat_special.resize(id + 1);
      }
      flat[id] = FromHex(hex);
      flat_special[id] = special != 0;
    }
  }
  const size_t n_common = std::min(flat.size(), static_cast<size_t>(n_vocab));
  size_t same = 0, differ_normal = 0, differ_special = 0;
  std::vector<int32_t> differing;
  for (size_t id = 0; id < n_common; ++id) {
    if (flat[id] == piece[id]) {
      ++same;
      continue;
    }
    (flat_special[id] ? differ_special : differ_normal)++;
    differing.push_back(static_cast<int32_t>(id));
  }
  std::vector<bool> utf8(flat.size()), eog(flat.size());
  for (size_t id = 0; id < flat.size(); ++id) {
    utf8[id] = ValidUtf8(flat[id]);
    eog[id] = id < n_common && llama_vocab_is_eog(vocab, static_cast<llama_token>(id));
  }
  size_t gguf_control = 0;
  for (int32_t id = 0; id < n_vocab; ++id) gguf_control += llama_vocab_is_control(vocab, id);
  std::printf(
      "GGUF vocabulary %d tokens (%zu control), tokenizer.json %zu; of the %zu common ids "
      "%zu have the same bytes, %zu differ (%zu of them special in tokenizer.json)\n",
      n_vocab, gguf_control, flat.size(), n_common, same, differ_normal + differ_special,
      differ_special);
  for (size_t i = 0; i < differing.size() && i < 12; ++i) {
    const size_t id = static_cast<size_t>(differing[i]);
    std::printf("  id %zu: tokenizer.json \"%s\"  GGUF \"%s\"\n", id, flat[id].c_str(),
                piece[id].c_str());
  }

  const std::string gbnf = ReadFile(dir + "/grammar.gbnf");
  std::vector<std::string> docs;
  {
    std::istringstream in(ReadFile(dir + "/documents.jsonl"));
    std::string line;
    while (std::getline(in, line)) docs.push_back(nlohmann::json::parse(line).get<std::string>());
  }
  std::vector<Step> steps;
  {
    std::istringstream in(ReadFile(dir + "/steps.tsv"));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      Step s;
      std::string hash, hash_utf8;
      fields >> s.doc >> s.step >> s.token >> s.allowed.count >> hash >> s.allowed_utf8.count >>
          hash_utf8;
      s.allowed.hash = std::stoull(hash, nullptr, 16);
      s.allowed_utf8.hash = std::stoull(hash_utf8, nullptr, 16);
      steps.push_back(s);
    }
  }
  std::unordered_map<std::string, int32_t> index;  // piece -> lowest id, as flatstate's bench
  for (int32_t id = 0; id < n_vocab; ++id) {
    if (!piece[static_cast<size_t>(id)].empty()) index.emplace(piece[static_cast<size_t>(id)], id);
  }
  std::printf("GBNF %zu bytes, %zu documents, %zu steps\n", gbnf.size(), docs.size(), steps.size());

  std::FILE* out = std::fopen(argv[3], "w");
  if (out == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", argv[3]);
    return 1;
  }
  std::fprintf(out,
               "doc\tstep\ttoken\town_token\tallowed\tallowed_nonspecial\tset_equal\t"
               "utf8_set_equal\tfull_apply_us\tsingle_apply_us\taccept_us\n");
  // ALLOWED_AT=doc:step writes the ids llama.cpp allows at that step to <out steps.tsv>.allowed.
  int allowed_at_doc = -1, allowed_at_step = -1;
  if (const char* at = std::getenv("ALLOWED_AT")) {
    std::sscanf(at, "%d:%d", &allowed_at_doc, &allowed_at_step);
  }
  std::vector<llama_token_data> data(static_cast<size_t>(n_vocab));
  Stats full, single, accept, full_accept;
  size_t set_match = 0, utf8_match = 0, choice_match = 0, eog_ok = 0, failed_docs = 0;
  double allowed_sum = 0, allowed_special_sum = 0;
  llama_sampler* smpl = nullptr;
  size_t pos = 0;
  int doc = -1;
  for (size_t si = 0; si < steps.size(); ++si) {
    const Step& s = steps[si];
    if (s.doc != doc) {
      if (smpl != nullptr) llama_sampler_free(smpl);
      smpl = llama_sampler_init_grammar(vocab, gbnf.c_str(), "root");
      if (smpl == nullptr) {
        std::fprintf(stderr, "llama.cpp refused the grammar\n");
        return 1;
      }
      doc = s.doc;
      pos = 0;
    }
    const std::string& text = docs[static_cast<size_t>(s.doc)];
    for (int32_t id = 0; id < n_vocab; ++id) data[static_cast<size_t>(id)] = {id, 0.0f, 0.0f};
    llama_token_data_array cur = {data.data(), data.size(), -1, false};
    double t = CpuUs();
    llama_sampler_apply(smpl, &cur);
    const double full_us = CpuUs() - t;

    // The allowed ids that tokenizer.json does not call special, as flatstate's bench counts them
    // (a strict comparison), and those of them whose bytes are valid UTF-8 with the GGUF's
    // end-of-generation ids among them taken out (eog_out) or put in (eog_in), for the comparison
    // that leaves out two differences by design (docs/benchmarks.md): llama.cpp's UTF-8 decoding
    // takes invalid bytes (F5-FF, overlong forms) as parts of code points, and a token the GGUF
    // marks end-of-generation but tokenizer.json does not ("</s>") is refused by llama.cpp until
    // the grammar is complete, whatever its text.
    size_t allowed = 0;
    IdSet nonspecial, eog_out, eog_in;
    for (size_t i = 0; i < cur.size; ++i) {
      const size_t id = static_cast<size_t>(cur.data[i].id);
      const bool comparable = id < flat.size() && !flat_special[id];
      if (comparable && utf8[id] && eog[id]) eog_in.Add(id);
      if (cur.data[i].logit == -INFINITY) continue;
      ++allowed;
      if (!comparable) continue;
      nonspecial.Add(id);
      if (utf8[id] && !eog[id]) {
        eog_out.Add(id);
        eog_in.Add(id);
      }
    }
    auto is_allowed = [&](int32_t id) { return data[static_cast<size_t>(id)].logit != -INFINITY; };
    const bool set_ok = nonspecial == s.allowed;
    const bool utf8_ok = eog_out == s.allowed_utf8 || eog_in == s.allowed_utf8;
    if (s.doc == allowed_at_doc && s.step == allowed_at_step) {
      std::FILE* f = std::fopen((std::string(argv[3]) + ".allowed").c_str(), "w");
      for (size_t i = 0; f != nullptr && i < cur.size; ++i) {
        if (cur.data[i].logit != -INFINITY) std::fprintf(f, "%d\n", cur.data[i].id);
      }
      if (f != nullptr) std::fclose(f);
    }
    set_match += set_ok;
    utf8_match += utf8_ok;
    allowed_sum += static_cast<double>(allowed);
    allowed_special_sum += static_cast<double>(allowed - nonspecial.count);
    full.us.push_back(full_us);

    int32_t own = -1;
    double single_us = 0, accept_us = 0;
    if (s.token < 0) {
      if (pos != text.size()) {
        std::fprintf(stderr, "doc %d: steps end at byte %zu of %zu\n", s.doc, pos, text.size());
      }
      for (int32_t id = 0; id < n_vocab; ++id) {
        if (llama_vocab_is_eog(vocab, id) && is_allowed(id)) {
          ++eog_ok;
          break;
        }
      }
      full_accept.us.push_back(full_us);
    } else {
      for (size_t len = std::min(text.size() - pos, max_piece); len > 0; --len) {
        auto it = index.find(text.substr(pos, len));
        if (it != index.end() && is_allowed(it->second)) {
          own = it->second;
          break;
        }
      }
      choice_match += own == s.token;
      const std::string& taken = flat[static_cast<size_t>(s.token)];
      if (!is_allowed(s.token) || text.compare(pos, taken.size(), taken) != 0 ||
          piece[static_cast<size_t>(s.token)] != taken) {
        std::fprintf(stderr, "doc %d step %d: token %d refused or not the document's bytes\n",
                     s.doc, s.step, s.token);
        ++failed_docs;
        while (si + 1 < steps.size() && steps[si + 1].doc == s.doc) ++si;
        continue;
      }
      llama_token_data one = {s.token, 1.0f, 0.0f};
      llama_token_data_array single_array = {&one, 1, -1, false};
      t = CpuUs();
      llama_sampler_apply(smpl, &single_array);
      single_us = CpuUs() - t;
      if (one.logit == -INFINITY)
        std::fprintf(stderr, "doc %d step %d: 1-entry apply refused\n", s.doc, s.step);
      try {
        t = CpuUs();
        llama_sampler_accept(smpl, s.token);
        accept_us = CpuUs() - t;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "doc %d step %d: accept threw: %s\n", s.doc, s.step, e.what());
        return 1;
      }
      pos += taken.size();
      single.us.push_back(single_us);
      accept.us.push_back(accept_us);
      full_accept.us.push_back(full_us + accept_us);
    }
    std::fprintf(out, "%d\t%d\t%d\t%d\t%zu\t%zu\t%d\t%d\t%.3f\t%.3f\t%.3f\n", s.doc, s.step,
                 s.token, own, allowed, nonspecial.count, set_ok ? 1 : 0, utf8_ok ? 1 : 0, full_us,
                 single_us, accept_us);
  }
  if (smpl != nullptr) llama_sampler_free(smpl);
  std::fclose(out);

  const size_t n = steps.size(), taken = n - docs.size();
  std::printf(
      "allowed set (ids not special in tokenizer.json) equal to flatstate's: %zu of %zu "
      "steps; over valid-UTF-8 tokens, end-of-generation ids aside: %zu of %zu\n"
      "own choice = flatstate's token: %zu of %zu steps; end-of-generation allowed at the "
      "end: %zu of %zu documents; failed documents: %zu\n",
      set_match, n, utf8_match, n, choice_match, taken, eog_ok, docs.size(), failed_docs);
  std::printf(
      "allowed tokens per step: mean %.0f (of which special or beyond tokenizer.json: "
      "%.1f)\n",
      allowed_sum / static_cast<double>(n), allowed_special_sum / static_cast<double>(n));
  full.Print("apply, whole vocabulary");
  accept.Print("accept");
  full_accept.Print("apply whole vocabulary + accept");
  single.Print("apply, 1 candidate (token taken)");
  llama_model_free(model);
  llama_backend_free();
  return failed_docs == 0 ? 0 : 1;
}
