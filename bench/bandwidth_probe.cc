// MemoryRead/<loads>/streams:S/prefetch:P/threads:T — how fast this machine streams memory into
// the cores, the limit batch-1 decode works against (issue 33). A 1 GiB buffer of floats is
// summed with `loads` (avx2: 256-bit, avx512: 512-bit vector loads, 4 independent accumulators
// per stream), split into S contiguous streams read in lockstep (several hardware prefetch
// streams per thread), optionally with software prefetch 1 KiB ahead of each stream, on T
// threads that each read their own contiguous part. No single variant is fastest on every CPU;
// tools/compare_llamacpp_table.py and docs/benchmarks.md quote the fastest per thread count
// ("probe max"). Rows whose instructions the CPU lacks are not registered.
//
// MemoryUpdate/avx512/threads:T — the same buffer read and written back in place (x = x * a + b,
// one fused multiply-add per float): the pattern of a batched recurrent decode step, whose
// sessions' states are read and rewritten once each (issue 30). Bytes counted both ways (2 per
// byte of the buffer).
#include "bench/bandwidth_probe.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

namespace flatstate::bench {
namespace {

constexpr size_t kFloats = size_t{1} << 28;  // 1 GiB
constexpr size_t kPrefetchFloats = 256;      // 1 KiB ahead

float* Buffer() {
  static std::vector<float>* buf = new std::vector<float>(kFloats, 1.f);  // every page touched
  return buf->data();
}

template <int S, bool kPrefetch>
__attribute__((target("avx2,fma"))) float SumAvx2(const float* p, size_t n) {
  const size_t len = n / S / 32 * 32;
  __m256 acc[S][4];
  for (auto& a : acc) {
    for (__m256& v : a) v = _mm256_setzero_ps();
  }
  for (size_t i = 0; i < len; i += 32) {
    for (int s = 0; s < S; ++s) {
      const float* q = p + s * len + i;
      if constexpr (kPrefetch)
        _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetchFloats), _MM_HINT_T0);
      for (int v = 0; v < 4; ++v) acc[s][v] = _mm256_add_ps(acc[s][v], _mm256_load_ps(q + 8 * v));
    }
  }
  __m256 t = _mm256_setzero_ps();
  for (auto& a : acc) {
    for (__m256& v : a) t = _mm256_add_ps(t, v);
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, t);
  return out[0] + out[7];
}

template <int S, bool kPrefetch>
__attribute__((target("avx512f"))) float SumAvx512(const float* p, size_t n) {
  const size_t len = n / S / 64 * 64;
  __m512 acc[S][4];
  for (auto& a : acc) {
    for (__m512& v : a) v = _mm512_setzero_ps();
  }
  for (size_t i = 0; i < len; i += 64) {
    for (int s = 0; s < S; ++s) {
      const float* q = p + s * len + i;
      if constexpr (kPrefetch)
        _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetchFloats), _MM_HINT_T0);
      for (int v = 0; v < 4; ++v) {
        acc[s][v] = _mm512_add_ps(acc[s][v], _mm512_load_ps(q + 16 * v));
      }
    }
  }
  __m512 t = _mm512_setzero_ps();
  for (auto& a : acc) {
    for (__m512& v : a) t = _mm512_add_ps(t, v);
  }
  alignas(64) float out[16];
  _mm512_store_ps(out, t);
  return out[0] + out[15];
}

// x = x * 0.5 + 1 over p[0, n), 64 floats a step (the values stay bounded: the fixed point is 2).
__attribute__((target("avx512f"))) void UpdateAvx512(float* p, size_t n) {
  const __m512 a = _mm512_set1_ps(0.5f), b = _mm512_set1_ps(1.f);
  for (size_t i = 0; i + 64 <= n; i += 64) {
    for (int v = 0; v < 4; ++v) {
      _mm512_storeu_ps(p + i + 16 * v, _mm512_fmadd_ps(_mm512_loadu_ps(p + i + 16 * v), a, b));
    }
  }
}

using SumFn = float (*)(const float*, size_t);

// The floats of one thread's contiguous part of the buffer (a multiple of 64).
size_t PartFloats(int threads) { return kFloats / threads / 64 * 64; }

// fn(t, first float of part t of buf) for every t < threads at once, t = 0 on the calling thread.
template <typename Fn>
void ForEachPart(float* buf, int threads, Fn fn) {
  const size_t part = PartFloats(threads);
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back([&, t] { fn(t, buf + t * part); });
  fn(0, buf);
  for (std::thread& th : pool) th.join();
}

void MemoryRead(benchmark::State& state, SumFn sum, int threads) {
  float* buf = Buffer();  // allocated and touched before the timed loop
  const size_t part = PartFloats(threads);
  for (auto _ : state) {
    std::vector<float> out(threads);
    ForEachPart(buf, threads, [&](int t, float* p) { out[t] = sum(p, part); });
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * part * threads * 4));
}

void MemoryUpdate(benchmark::State& state, int threads) {
  float* buf = Buffer();
  const size_t part = PartFloats(threads);
  for (auto _ : state) {
    ForEachPart(buf, threads, [&](int, float* p) { UpdateAvx512(p, part); });
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * part * threads * 4 * 2));
}

template <int S, bool kPrefetch>
void Register(const char* isa, SumFn fn) {
  for (int threads : {1, 2}) {
    benchmark::RegisterBenchmark(absl::StrCat("MemoryRead/", isa, "/streams:", S,
                                              "/prefetch:", kPrefetch ? 1 : 0, "/threads:", threads)
                                     .c_str(),
                                 MemoryRead, fn, threads)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(1);
  }
}

}  // namespace

void RegisterBandwidthProbe() {
  if (__builtin_cpu_supports("avx2")) {
    Register<1, false>("avx2", &SumAvx2<1, false>);
    Register<1, true>("avx2", &SumAvx2<1, true>);
    Register<4, false>("avx2", &SumAvx2<4, false>);
    Register<4, true>("avx2", &SumAvx2<4, true>);
  }
  if (__builtin_cpu_supports("avx512f")) {
    Register<1, false>("avx512", &SumAvx512<1, false>);
    Register<1, true>("avx512", &SumAvx512<1, true>);
    Register<4, false>("avx512", &SumAvx512<4, false>);
    Register<4, true>("avx512", &SumAvx512<4, true>);
    for (int threads : {1, 2}) {
      benchmark::RegisterBenchmark(absl::StrCat("MemoryUpdate/avx512/threads:", threads).c_str(),
                                   MemoryUpdate, threads)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->MinTime(1);
    }
  }
}

}  // namespace flatstate::bench
