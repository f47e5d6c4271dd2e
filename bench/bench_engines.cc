// The engines and inputs flatstate-bench's families share (bench/bench_engines.h).
#include "bench/bench_engines.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/util/model_writer.h"

namespace flatstate {

namespace fs = std::filesystem;

std::string SourceDir() { return FLATSTATE_SOURCE_DIR; }

std::string BenchDir() {
  const char* d = std::getenv("FLATSTATE_BENCH_DIR");
  return d ? d : "/tmp/flatstate-bench";
}

// Writes the GPT-2-small-shaped random model once.
std::string Gpt2Small(AttentionKind kind) {
  const std::string dir = BenchDir() + "/gpt2-small-" + std::string(AttentionKindName(kind));
  if (fs::exists(dir + "/model.safetensors")) return dir;
  fs::create_directories(dir);
  auto st = testing::WriteRandomModel(dir, testing::Gpt2SmallConfig(kind), 1234);
  if (!st.ok()) {
    std::fprintf(stderr, "cannot write %s: %s\n", dir.c_str(),
                 std::string(st.status().message()).c_str());
    std::exit(1);
  }
  return dir;
}

// FLATSTATE_BENCH_DEVICE=cpu|cuda|auto (default cpu); see docs/gpu.md for the CUDA runs.
const char* BenchDevice() {
  const char* dev = std::getenv("FLATSTATE_BENCH_DEVICE");
  return dev != nullptr ? dev : "cpu";
}

// FLATSTATE_BENCH_KV_DTYPE=f32|bf16 (default f32): the K/V cache of softmax engines
// (--kv_dtype), here and in the comparison rows (compare_bench.cc).
KvDtype BenchKvDtype() {
  const char* kv = std::getenv("FLATSTATE_BENCH_KV_DTYPE");
  if (kv == nullptr) return KvDtype::kF32;
  auto kv_dtype = ParseKvDtype(kv);
  if (!kv_dtype.ok()) {
    std::fprintf(stderr, "%s\n", std::string(kv_dtype.status().message()).c_str());
    std::exit(1);
  }
  return *kv_dtype;
}

// FLATSTATE_BENCH_WEIGHT_DTYPE=f32|bf16|int8|int4|bf16dot (default f32): the layer weights of the
// families bench/engine_bench.cc names.
WeightDtype BenchWeightDtype() {
  const char* w = std::getenv("FLATSTATE_BENCH_WEIGHT_DTYPE");
  if (w == nullptr) return WeightDtype::kF32;
  auto dtype = ParseWeightDtype(w);
  if (!dtype.ok()) {
    std::fprintf(stderr, "FLATSTATE_BENCH_WEIGHT_DTYPE: %s\n",
                 std::string(dtype.status().message()).c_str());
    std::exit(1);
  }
  return *dtype;
}

// One engine per (model, threads, KV blocks, weight type), kept for the whole run. kv_blocks 0:
// enough for a 64k-token context on the softmax models, plus headroom.
Engine* GetEngine(const std::string& dir, int threads, int kv_blocks, WeightDtype dtype) {
  static std::map<std::string, std::unique_ptr<Engine>> cache;
  // Device runs hold one engine at a time: a softmax engine's KV pool is sized per case.
  const std::string key =
      absl::StrCat(dir, "#", threads, "#", kv_blocks, "#", WeightDtypeName(dtype));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.get();
  auto model = Model::Load(dir);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    std::exit(1);
  }
  EngineOptions o;
  o.threads = threads;
  o.kv_blocks = kv_blocks > 0 ? kv_blocks : 8192 + 64;
  // FLATSTATE_BENCH_BATCH_INVARIANT=1: the CUDA GEMMs by the fixed-order kernel (kernels/gemm.h).
  const char* invariant = std::getenv("FLATSTATE_BENCH_BATCH_INVARIANT");
  o.batch_invariant = invariant != nullptr && std::string(invariant) == "1";
  auto device = ParseDevice(BenchDevice());
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", std::string(device.status().message()).c_str());
    std::exit(1);
  }
  o.device = *device;
  o.weight_dtype = dtype;
  o.kv_dtype = BenchKvDtype();
  auto e = Engine::Create(std::move(*model), o);
  if (!e.ok()) {
    std::fprintf(stderr, "%s\n", std::string(e.status().message()).c_str());
    std::exit(1);
  }
  return (cache[key] = std::move(*e)).get();
}

std::vector<int32_t> Tokens(size_t n) {
  std::vector<int32_t> t(n);
  std::mt19937 g(5);
  for (auto& v : t) v = static_cast<int32_t>(g() % 256);
  return t;
}

absl::Status PrefillFresh(Engine* e, const std::vector<int32_t>& prompt) {
  SessionState s = e->NewSession({});
  absl::Status st = e->Append(&s, prompt);
  std::vector<StepResult> res;
  const StepRequest req{&s, 1 << 30, false};
  while (st.ok() && !s.pending.empty()) st = e->Step(std::span<const StepRequest>(&req, 1), &res);
  e->ReleaseSession(&s);
  return st;
}

// Puts `s` at context `ctx` cheaply: the decode cost depends on the context length, not on the
// values, so softmax gets its KV blocks reserved and filled with random rows and linear kinds just
// get their position moved (their state has a fixed size by construction).
void FastForward(Engine* e, SessionState* s, int64_t ctx) {
  if (e->kv_pool() != nullptr) {
    if (!e->kv_pool()->Reserve(&s->kv_blocks, ctx + 1).ok()) std::exit(2);
    // Off the CPU the kernels read the device pool, which this host fill would not reach.
    if (e->device() != Device::kCpu) {
      s->position = ctx;
      return;
    }
    std::mt19937 g(1);
    std::uniform_real_distribution<float> u(-1, 1);
    for (int32_t b : s->kv_blocks) {
      for (int l = 0; l < e->config().kv_layers(); ++l) {  // the pool's (softmax) layers
        for (int slot = 0; slot < e->kv_pool()->block_size(); ++slot) {
          std::vector<float> row(e->config().kv_dim());
          for (int kv = 0; kv < 2; ++kv) {
            for (float& x : row) x = u(g);
            e->kv_pool()->WriteRow(b, l, kv, slot, row.data());
          }
        }
      }
    }
  }
  s->position = ctx;
}

// Bytes of weights one forward step reads: the GEMM weights as this engine prepared them on its
// device for its weight type (PreparedWeightBytes; the output head is f32 always) plus the fp32
// embedding and norms (the whole file less its GEMM weights' stored bytes).
double StepWeightBytes(const Engine& e) {
  const ModelConfig& c = e.config();
  double bytes = static_cast<double>(e.model().weight_bytes());
  // The layers' GEMM shapes as the model bound them (fused q|k|v and, for SwiGLU, gate|up).
  const LayerWeights& l0 = e.model().weights().layers.front();
  for (auto [n, k] : {std::pair<int64_t, int64_t>{l0.wqkv.n, l0.wqkv.k},
                      {l0.wo.n, l0.wo.k},
                      {l0.w1.n, l0.w1.k},
                      {l0.w2.n, l0.w2.k}}) {
    const double prepared =
        static_cast<double>(PreparedWeightBytes(e.device(), e.weight_dtype(), n, k));
    // The weight's bytes in the file (int8 / int4: quants plus fp32 scales).
    double stored = 4.0 * n * k;
    if (c.torch_dtype == TorchDtype::kBfloat16) stored = 2.0 * n * k;
    if (c.torch_dtype == TorchDtype::kInt8 || c.torch_dtype == TorchDtype::kInt4) {
      const WeightDtype q =
          c.torch_dtype == TorchDtype::kInt8 ? WeightDtype::kInt8 : WeightDtype::kInt4;
      stored = static_cast<double>(n) * (QuantizedRowBytes(q, k) + 4 * QuantizedBlocks(k));
    }
    bytes += c.num_hidden_layers * (prepared - stored);
  }
  return bytes;
}

}  // namespace flatstate
