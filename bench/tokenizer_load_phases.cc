// Where a tokenizer.json load spends its time (docs/benchmarks.md, "Tokenizers"): runs the phases
// of HfTokenizer::FromFile one by one (file read, JSON read, BPE model with its vocabulary and
// merge tables, pre-tokenizer (regex compile), added tokens, whole FromFile) and prints the
// median wall time and process CPU time (all threads) of each over the repetitions, on one thread
// (the BPE model may use a second). On a shared machine the CPU time is the steadier number.
//   flatstate-tokenizer-load-phases <tokenizer.json> [repetitions, default 7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/hf/added_vocabulary.h"
#include "engine/tokenizer/hf/bpe_model.h"
#include "engine/tokenizer/hf/hf_tokenizer.h"
#include "engine/tokenizer/hf/json_reader.h"
#include "engine/tokenizer/hf/pre_tokenizer.h"
#include "engine/util/read_file.h"

namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double CpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// Wall and CPU ms since Start().
struct Timer {
  double wall = NowMs(), cpu = CpuMs();
  std::pair<double, double> Lap() {
    const double w = NowMs(), c = CpuMs();
    std::pair<double, double> d{w - wall, c - cpu};
    wall = w, cpu = c;
    return d;
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

const nlohmann::json& Field(const nlohmann::json& doc, const char* key) {
  static const nlohmann::json* const kNull = new nlohmann::json();
  auto it = doc.find(key);
  return it == doc.end() ? *kNull : *it;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <tokenizer.json> [repetitions]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 7;
  const char* names[] = {"read file",     "JSON read",    "BPE model",
                         "pre-tokenizer", "added tokens", "whole FromFile"};
  std::vector<std::vector<double>> ms(6), cpu(6);
  const auto record = [&](int phase, Timer* t) {
    const auto [w, c] = t->Lap();
    ms[phase].push_back(w);
    cpu[phase].push_back(c);
  };
  for (int r = 0; r < reps; ++r) {
    Timer t;
    auto text = flatstate::ReadWholeFile(path);
    record(0, &t);
    if (!text.ok()) {
      std::fprintf(stderr, "%s\n", std::string(text.status().message()).c_str());
      return 1;
    }
    t.Lap();
    flatstate::hf::BpeParts parts;
    auto doc = flatstate::hf::ReadTokenizerJson(*text, path, &parts);
    record(1, &t);
    if (!doc.ok() || !doc->contains("model")) {
      std::fprintf(stderr, "%s: JSON read failed\n", path.c_str());
      return 1;
    }
    t.Lap();
    auto bpe = flatstate::hf::BpeModel::FromJson((*doc)["model"], "model", &parts);
    record(2, &t);
    t.Lap();
    auto pre = flatstate::hf::PreTokenizer::FromJson(Field(*doc, "pre_tokenizer"), "pre");
    record(3, &t);
    t.Lap();
    auto added =
        flatstate::hf::AddedVocabulary::FromJson(Field(*doc, "added_tokens"), "added", nullptr);
    record(4, &t);
    if (!bpe.ok() || !pre.ok() || !added.ok()) {
      std::fprintf(stderr, "%s: a phase failed\n", path.c_str());
      return 1;
    }
    t.Lap();
    auto tok = flatstate::HfTokenizer::FromFile(path);
    record(5, &t);
    if (!tok.ok()) {
      std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
      return 1;
    }
  }
  for (int i = 0; i < 6; ++i) {
    std::printf("%-15s %7.1f ms wall %7.1f ms CPU\n", names[i], Median(ms[i]), Median(cpu[i]));
  }
  std::printf("(median of %d)\n", reps);
  return 0;
}
