// The engines and inputs flatstate-bench's families share: the synthetic GPT-2-small models, the
// FLATSTATE_BENCH_* environment (bench/engine_bench.cc's header lists it), one cached engine per
// configuration, prompts, a cheap fast-forward to a context, and the bytes a step reads.
// A bad environment value or a model that does not load ends the process with a message: a
// benchmark program has no caller to return a Status to. Not thread-safe (Google Benchmark runs
// cases one at a time).
#ifndef FLATSTATE_BENCH_BENCH_ENGINES_H_
#define FLATSTATE_BENCH_BENCH_ENGINES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/runtime/engine.h"

namespace flatstate {

std::string SourceDir();
// $FLATSTATE_BENCH_DIR, default /tmp/flatstate-bench.
std::string BenchDir();
// Writes the GPT-2-small-shaped random model of `kind` once (12 layers, d_model 768, 12 heads,
// MLP 3072) under BenchDir(); returns its folder.
std::string Gpt2Small(AttentionKind kind);
// FLATSTATE_BENCH_DEVICE (cpu | cuda | auto; default cpu).
const char* BenchDevice();
// FLATSTATE_BENCH_KV_DTYPE (f32 | bf16; default f32).
KvDtype BenchKvDtype();
// FLATSTATE_BENCH_WEIGHT_DTYPE (f32 | bf16 | int8 | int4; default f32).
WeightDtype BenchWeightDtype();
// One engine per (model, threads, KV blocks, weight type), kept for the whole run (a device run
// holds one at a time). kv_blocks 0: enough for a 64k-token context on the softmax models.
Engine* GetEngine(const std::string& dir, int threads, int kv_blocks = 0,
                  WeightDtype dtype = WeightDtype::kF32);
// n fixed pseudo-random byte tokens.
std::vector<int32_t> Tokens(size_t n);
// Prefills `prompt` into a fresh session of `e` in the engine's chunked steps, then releases the
// session (the prefill benchmarks' unit of work); the engine's error if it refuses the prompt or
// a step.
absl::Status PrefillFresh(Engine* e, const std::vector<int32_t>& prompt);
// Puts `s` at context `ctx` cheaply (see bench_engines.cc).
void FastForward(Engine* e, SessionState* s, int64_t ctx);
// Bytes of weights one forward step of `e` reads, as `e` prepared them on its device.
double StepWeightBytes(const Engine& e);

}  // namespace flatstate

#endif  // FLATSTATE_BENCH_BENCH_ENGINES_H_
