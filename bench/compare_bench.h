// The flatstate side of the llama.cpp comparison (bench/compare_llamacpp.sh, docs/benchmarks.md
// "llama.cpp side by side"): prefill, batch-1 decode and decode-at-depth rows per weight type and
// thread count, on the GPT-2-small shape and on model folders llama.cpp also runs (the same
// checkpoint). bench/compare_bench.cc lists the cases.
#ifndef FLATSTATE_BENCH_COMPARE_BENCH_H_
#define FLATSTATE_BENCH_COMPARE_BENCH_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/paged_attention.h"

namespace flatstate {

// Which rows RegisterCompareBenchmarks adds per (model, weight type).
struct CompareRows {
  std::vector<int64_t> prefill_lens;  // Prefill/.../threads:T/len:N, T = 1 and 2
  std::vector<int64_t> depths;        // DecodeAtContext/.../threads:T/ctx:N
  std::vector<int> depth_threads;     // the T of the DecodeAtContext rows
  // Decode/.../threads:T/batch:1 (T = 1 and 2) at a 64-token context. The GPT-2-small models get
  // theirs from engine_bench.cc's Decode family instead.
  bool decode = false;
};

// The GPT-2-small rows: prefill 512 and 4096, depth 0 / 1k / 16k at 1 and 2 threads.
CompareRows Gpt2CompareRows();
// The same-checkpoint rows: prefill 512, batch-1 decode, depth 0 and `depths` at 2 threads.
CompareRows CheckpointCompareRows(const std::vector<int64_t>& depths);

// Registers `rows` for every (name, model folder) in `models` and every type in `dtypes`; softmax
// engines keep their K/V cache as `kv_dtype`.
void RegisterCompareBenchmarks(const std::vector<std::pair<std::string, std::string>>& models,
                               const std::vector<WeightDtype>& dtypes, KvDtype kv_dtype,
                               const CompareRows& rows);

}  // namespace flatstate

#endif  // FLATSTATE_BENCH_COMPARE_BENCH_H_
