// The flatstate side of the llama.cpp comparison (bench/compare_llamacpp.sh, docs/benchmarks.md
// "llama.cpp side by side"): prefill and decode-at-depth rows per weight type and thread count on
// the GPT-2-small shape. bench/compare_bench.cc lists the cases.
#ifndef FLATSTATE_BENCH_COMPARE_BENCH_H_
#define FLATSTATE_BENCH_COMPARE_BENCH_H_

#include <string>
#include <utility>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/paged_attention.h"

namespace flatstate {

// Registers Prefill/<name>/<type>/threads:T/len:N and DecodeAtContext/<name>/<type>/threads:T/
// ctx:N for every (name, model folder) in `models` and every type in `dtypes`; softmax engines
// keep their K/V cache as `kv_dtype`.
void RegisterCompareBenchmarks(const std::vector<std::pair<std::string, std::string>>& models,
                               const std::vector<WeightDtype>& dtypes, KvDtype kv_dtype);

}  // namespace flatstate

#endif  // FLATSTATE_BENCH_COMPARE_BENCH_H_
