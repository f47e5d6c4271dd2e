// RWKV-7's ops ("Goose"; engine/runtime/mixers/rwkv7_mixer.h uses them): the token-shift mixes,
// the LoRA activations, the value residual toward layer 0's v, the key preparation, the
// generalized delta rule and the output (per-head GroupNorm, bonus, gate). Row-major fp32, rows
// of `dim` (or heads x head_dim) floats at stride dim unless a stride is given; every row, and
// every (sequence, head) of the recurrence, is computed alone in a fixed order, so results are
// bitwise independent of the batch and the threads. Pointers are in the op's device memory. CPU
// bodies in cpu/rwkv7.cc; CUDA bodies in cuda/rwkv7.cu (asynchronous on cuda::Stream(); run on an H200
// on 2026-11-26 through tests/engine/runtime/engine_device_hf_test.cc's RWKV-7 folder). The math follows tools/flatstate_ref/rwkv7.py (fla's RWKV7 layer,
// BlinkDL's rwkv_v7_numpy.py).
#ifndef FLATSTATE_KERNELS_RWKV7_H_
#define FLATSTATE_KERNELS_RWKV7_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/device.h"
#include "kernels/linear_attention.h"
#include "kernels/parallel.h"

namespace flatstate {

// out[j][r][c] = x[r][c] + d[r][c] * mu[j * dim + c] for j < n_mu (d = previous row - this row:
// RWKV's token-shift lerps x_r, x_w, x_k, x_v, x_a, x_g; out holds n_mu blocks of rows x dim).
template <Device D>
void TokenShiftMix(const float* x, const float* d, const float* mu, int n_mu, int64_t rows,
                   int64_t dim, float* out);

// In place on `rows` rows of `dim` floats:
//   kSigmoid      x = 1 / (1 + exp(-x))
//   kTanh         x = tanh(x)
//   kReluSquared  x = max(x, 0)^2                          (RWKV's channel mix)
//   kRwkvLogDecay x = -exp(-0.5) / (1 + exp(-x))            (RWKV-7's log decay, in (-0.607, 0))
enum class Activation { kSigmoid, kTanh, kReluSquared, kRwkvLogDecay };
template <Device D>
void ActivateRows(float* x, int64_t rows, int64_t dim, Activation act);

// v += (target - v) * sigmoid(z), element-wise over rows x dim (RWKV-7's value residual toward
// layer 0's v, torch.lerp).
template <Device D>
void LerpToward(float* v, const float* target, const float* z, int64_t rows, int64_t dim);

// RWKV-7's keys, per row and head (D = heads x head_dim floats per row):
//   kk = normalize(k * k_k)   over the head: u / max(|u|, 1e-12) (F.normalize), or with
//                             fused_l2 u / sqrt(|u|^2 + 1e-6) (fla's fused l2_norm)
//   k  = k * (1 + (a - 1) * k_a)   in place
template <Device D>
void Rwkv7Keys(float* k, const float* a, const float* k_k, const float* k_a, int64_t rows,
               int heads, int head_dim, bool fused_l2, float* kk);

// Every (sequence, head) of one layer: q holds r, k the updated keys, v the values (key_heads =
// value_heads = heads, key_dim = value_dim = head_dim; GroupedHeadBatch's strides), and per row
// and channel logw (log decay), kk and a at stride wka_stride. Per token, with S [key][value],
//   S <- diag(exp(logw)) S - (kk * a) (kk^T S) + k v^T;   o = S^T r
// (the generalized delta rule; the kk term reads the state before the decay).
//
// Two forms, as the gated delta rule (kernels/gated_delta.h). Recurrent: the step above, token by
// token (cpu/rwkv7_step.cc: one pass over the state per token). Chunked: chunks of `chunk` tokens
// aligned to absolute positions (multiples of `chunk`), each as small matrix products in the WY /
// UT form (the derivation and the cut of a chunk whose decays compound past e^-48 are in
// cpu/rwkv7_chunk.cc). Both compute the same function and agree to fp32 rounding
// (tests/kernels/rwkv7_test.cc states the tolerance). The CPU body runs the recurrent form for
// every T, prefill included: at RWKV-7's head_dim 64 it does fewer multiply-adds than the chunked
// form (5 N^2 per token against about 8 N^2 at chunk 64) on a state that stays in L1, and measured
// 1.8x faster than Rwkv7ChunkCpu at chunk 64 on an AVX2 EPYC (docs/benchmarks.md, 2026-11-27). So
// on the CPU a run split anywhere gives the same floats as the run whole, and prefill the same
// floats as decode. Each (sequence, head) is computed alone in a fixed order, so a sequence's
// outputs and state are bitwise independent of the batch and the thread. The CUDA body runs decode
// in the recurrent form and prefill in the chunked form (cuda/rwkv7_chunk.h; within the tolerance
// of the CPU's, not bit for bit); Rwkv7ChunkCpu is that form's CPU statement, tested against the
// recurrent one, and `chunk` is its grid (the CPU body does not use it).
struct Rwkv7Batch : GroupedHeadBatch {
  const float* logw = nullptr;
  const float* kk = nullptr;
  const float* a = nullptr;
  int64_t wka_stride = 0;
};

template <Device D>
absl::Status CheckRwkv7Shape(int heads, int head_dim);

template <Device D>
void Rwkv7Recurrence(const Rwkv7Batch& b, const Parallel& par);

// One (sequence, head) of the CPU body: row t of each input at its pointer plus t times its
// stride (r and k share qk_stride; logw, kk and a share wka_stride), head_dim N floats each.
struct Rwkv7HeadRows {
  const float* r = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* logw = nullptr;
  const float* kk = nullptr;
  const float* a = nullptr;
  float* out = nullptr;
  int64_t qk_stride = 0;
  int64_t v_stride = 0;
  int64_t wka_stride = 0;
  int64_t out_stride = 0;
};

// Floats of scratch Rwkv7StepCpu / Rwkv7ChunkCpu need for T tokens (T == 1: the step's 4 N).
size_t Rwkv7Scratch(int head_dim, int64_t T, int chunk);

// The recurrent form, token by token over T tokens, updating S [N][N]; scratch: 4 N floats.
void Rwkv7StepCpu(int N, const Rwkv7HeadRows& rows, int64_t T, float* S, float* scratch);

// The chunked form over T tokens at positions pos0 .. pos0 + T - 1 (the chunk grid), updating S;
// scratch: Rwkv7Scratch(N, T, chunk) floats. Thread-compatible across (sequence, head) pairs. The
// CUDA prefill's math on the CPU (see Rwkv7Recurrence); only tests call it.
void Rwkv7ChunkCpu(int N, const Rwkv7HeadRows& rows, int64_t T, int64_t pos0, int chunk,
                   float* S, float* scratch);

// RWKV-7's output, in place on o, per row and head h (N = head_dim channels, weights per channel):
//   o = (o - mean) / sqrt(var + eps) * gn_w + gn_b      (GroupNorm, one group per head)
//   o += (sum_i r_i k_i r_k[h][i]) v                    (the bonus)
//   o *= g
// r, k, v, g: rows of heads x head_dim floats, like o. Mean and variance accumulate in double.
template <Device D>
void Rwkv7Output(float* o, const float* r, const float* k, const float* v, const float* g,
                 const float* r_k, const float* gn_w, const float* gn_b, int64_t rows, int heads,
                 int head_dim, float eps);

}  // namespace flatstate

#endif  // FLATSTATE_KERNELS_RWKV7_H_
