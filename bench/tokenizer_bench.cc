// Tokenizer throughput (docs/benchmarks.md, "Tokenizers (issue 28)"): loads a tokenizer.json,
// encodes every line of a text file on one thread, then decodes the ids token by token
// (DecodeNext, as a stream does). Prints load ms (wall and thread CPU), encode MB/s and tokens/s,
// decode tokens/s.
//   flatstate-tokenizer-bench <tokenizer.json> <text file> [repetitions]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "engine/tokenizer/hf/hf_tokenizer.h"
#include "engine/util/read_file.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <tokenizer.json> <text file> [repetitions]\n", argv[0]);
    return 2;
  }
  const int reps = argc > 3 ? std::max(1, std::atoi(argv[3])) : 3;
  double t0 = Now();
  const double c0 = CpuNow();
  auto tok = flatstate::HfTokenizer::FromFile(argv[1]);
  const double load_ms = (Now() - t0) * 1e3;
  const double load_cpu_ms = (CpuNow() - c0) * 1e3;
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  auto text = flatstate::ReadWholeFile(argv[2]);
  if (!text.ok()) {
    std::fprintf(stderr, "%s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < text->size();) {
    size_t e = text->find('\n', pos);
    e = e == std::string::npos ? text->size() : e + 1;
    lines.push_back(text->substr(pos, e - pos));
    pos = e;
  }
  double best_encode = 1e30, best_decode = 1e30;
  size_t n_tokens = 0;
  std::vector<std::vector<int32_t>> ids(lines.size());
  for (int r = 0; r < reps; ++r) {
    t0 = Now();
    n_tokens = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      ids[i] = *(*tok)->Encode(lines[i], false);
      n_tokens += ids[i].size();
    }
    best_encode = std::min(best_encode, Now() - t0);
    t0 = Now();
    size_t bytes = 0;
    for (const auto& line : ids) {
      std::string state;
      for (int32_t id : line) bytes += (*tok)->DecodeNext(id, &state).size();
      bytes += (*tok)->DecodeFlush(&state).size();
    }
    best_decode = std::min(best_decode, Now() - t0);
    if (bytes == 0 && !text->empty()) std::fprintf(stderr, "decoded nothing\n");
  }
  std::printf(
      "load_ms=%.1f load_cpu_ms=%.1f lines=%zu bytes=%zu tokens=%zu encode_s=%.3f encode_MBps=%.2f "
      "encode_tokps=%.0f decode_s=%.3f decode_tokps=%.0f (best of %d)\n",
      load_ms, load_cpu_ms, lines.size(), text->size(), n_tokens, best_encode,
      text->size() / best_encode / 1e6, n_tokens / best_encode, best_decode, n_tokens / best_decode,
      reps);
  return 0;
}
