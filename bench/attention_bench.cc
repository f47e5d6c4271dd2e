// PagedAttention/<body>/<kv dtype>/rows:R/ctx:C: the CPU softmax attention of one layer at the
// GPT-2-small shape (12 heads of 64) for R query rows of one session ending at context C (rows:1
// is a decode step, rows:512 a prefill chunk), on 2 threads, with each body of
// kernels/cpu/attend_tile.h that this CPU runs (scalar, avx2, avx512; all give the same bits).
// Shows what a CPU without AVX-512 gains from the AVX2 body.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/util/thread_pool.h"
#include "kernels/gemm.h"
#include "kernels/paged_attention.h"

namespace flatstate {
namespace {

constexpr int kHeads = 12, kHeadDim = 64, kHidden = kHeads * kHeadDim, kBlock = 16;

void Attend(benchmark::State& state, GemmIsa isa, KvDtype dtype) {
  const int64_t rows = state.range(0), ctx = state.range(1);
  if (!SetGemmIsa(isa)) {
    state.SkipWithError("body not supported on this CPU");
    return;
  }
  const int64_t blocks = (ctx + kBlock - 1) / kBlock;
  std::vector<uint16_t> pool(static_cast<size_t>(blocks * 2 * kBlock * kHidden) *
                             KvDtypeBytes(dtype) / sizeof(uint16_t));
  uint32_t seed = 1;
  for (uint16_t& x : pool) {  // bf16 bit patterns of values in about [-2, 2] (f32: pairs of them)
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<uint16_t>(0x3c00 + (seed >> 24) + ((seed >> 20) & 1) * 0x8000);
  }
  PagedKv kv{pool.data(), kBlock, 1, kHidden, dtype};
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  std::vector<PagedRow> prow;
  for (int64_t i = 0; i < rows; ++i) prow.push_back(PagedRow{i, ctx - rows + 1 + i, 0});
  std::vector<float> qkv(static_cast<size_t>(rows * 3 * kHidden), 0.05f), out(rows * kHidden);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>(i % 13) * 0.02f - 0.1f;
  PoolParallel par(2);
  for (auto _ : state) {
    PagedAttention<Device::kCpu>(kv, table.data(), prow.data(), rows, qkv.data(), 3 * kHidden,
                                 out.data(), kHidden, 0,
                                 AttentionShape{kHeads, kHeads, kHeadDim}, par);
    benchmark::DoNotOptimize(out.data());
  }
  SetGemmIsa(BestGemmIsa());
  state.SetItemsProcessed(state.iterations() * rows);
}

int Register() {
  for (auto [name, isa] : {std::pair<const char*, GemmIsa>{"scalar", GemmIsa::kScalar},
                           {"avx2", GemmIsa::kAvx2},
                           {"avx512", GemmIsa::kAvx512}}) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBf16}) {
      const std::string n = absl::StrCat("PagedAttention/", name, "/", KvDtypeName(dtype));
      benchmark::RegisterBenchmark(n.c_str(), Attend, isa, dtype)
          ->ArgNames({"rows", "ctx"})
          ->Args({1, 4096})
          ->Args({1, 16384})
          ->Args({512, 4096})
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace flatstate
