// GEMM throughput per weight type for flatstate-bench (bench/gemm_bench.cc lists the cases).
#ifndef FLATSTATE_BENCH_GEMM_BENCH_H_
#define FLATSTATE_BENCH_GEMM_BENCH_H_

namespace flatstate {

// Registers the GemmModel/... Google Benchmark cases.
void RegisterGemmBenchmarks();

}  // namespace flatstate

#endif  // FLATSTATE_BENCH_GEMM_BENCH_H_
